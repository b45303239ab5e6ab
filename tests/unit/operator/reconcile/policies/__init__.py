"""Table tests of the reconcile policies, one file per module of disttrain.reconcile.policies."""

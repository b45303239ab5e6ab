"""Tests of disttrain.reconcile (operator/disttrain/reconcile/)."""

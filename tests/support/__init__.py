"""What tests share: object builders (fixtures), reconcile steps, chained Step builders (builders), scenario-like reports."""

"""What tests share: object builders (fixtures), reconcile steps, scenario-like reports."""

"""The probe's checks, a module per phase or per step of one, in the order they run: inventory,
rendezvous, connectivity, interface choice, NCCL's own choice, collective (the versions phase
compares with ``contract.versions``, which the operator shares)."""

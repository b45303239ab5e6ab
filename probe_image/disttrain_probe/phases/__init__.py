"""The probe's phases, in the order they run: inventory, rendezvous, connectivity, interface choice, NCCL's own choice, collective."""

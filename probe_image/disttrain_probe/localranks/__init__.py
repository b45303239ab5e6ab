"""Several processes per node (``numProcPerNode`` > 1): roles, local rank 0's spawning, the other local ranks' entry."""

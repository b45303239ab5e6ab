"""Generated faults (issue 31): a grammar of typed fault descriptions (``grammar``), a seeded
generator that writes each as a scenario (``generate``), an oracle that says from the fault
alone what a right verdict holds (``oracle``), a grader of a job's final conditions against
it (``grade``), and the runner on the real cluster (``runner``; ``python -m
localcluster.faults``). Everything but ``runner`` is pure."""

"""Generated faults (issue 31): a grammar of typed fault descriptions (``grammar``), a seeded
generator that writes each as a scenario (``generate``), an oracle that says from the fault
alone what a right verdict holds (``oracle``), a grader of a job's final conditions against
it (``grade``), the runner on the real cluster (``runner``; ``python -m
localcluster.faults``) and its direct path (``direct``, with its pure parts in
``directplan``: probes in plain network namespaces, the operator's pure verdict; seconds a
case). Everything but ``runner`` and ``direct`` is pure."""

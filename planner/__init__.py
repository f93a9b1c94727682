"""gpuplan's pure planning library.

No I/O happens in this package: the command line (:mod:`gpuplan`) reads files and clusters, the
operator (:mod:`gpuplan_operator`) reads and writes the cluster. Everything here takes a frozen
snapshot of nodes, free cards and requests and returns values that carry their reasons, so the
operator and the command line render exactly the same plan from the same input.

Importing the package imports nothing else: ``gpuplan --help`` should not pay for the planner.
"""

"""``gpuplan``: the command line.

``gpuplan plan`` runs the planner (:mod:`planner`) on a plan and a node snapshot read from files,
standard input or, read only, a live cluster; ``kubectl gpuplan`` is the same as a kubectl plugin
(:mod:`gpuplan.kubectl`). Other commands (``gpuplan loadtest``) register through the
``gpuplan.commands`` entry points. A command imports what it needs when it runs: ``--help`` never
loads the solver or a Kubernetes client.
"""

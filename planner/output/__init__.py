"""What goes out of the planner: the objects the operator writes (and ``-o manifests`` prints),
the Ragnaros values.yaml, and the explanation of a plan."""

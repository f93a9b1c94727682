"""Placement inside a node: which devices (DRA) or NUMA zones each instance gets, and the CPU its
pods ask for."""

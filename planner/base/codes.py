"""Typed outcome codes of the planner: what a search established, how, and why a type did not fit.

Notes
-----
These are the values of the JSON output's ``search[].status``/``search[].method`` and of a
conflict's ``kind``, and the operator uses the same values as condition reasons and metric
labels, so a plan's status, its events, the metrics and ``gpuplan plan -o json`` all say the same
thing in the same words.
"""

from __future__ import annotations

from enum import StrEnum


class SolveStatus(StrEnum):
    """What one search established about one resource type."""

    OPTIMAL = "optimal"  # the best plan, proven
    FEASIBLE = "feasible"  # a plan, not proven best (time ran out)
    INFEASIBLE = "infeasible"  # proven: no plan exists
    UNKNOWN = "unknown"  # neither a plan nor a proof within the time


class Method(StrEnum):
    """What decided a resource type."""

    FAST_PATH = "fast-path"  # every request's best split placed greedily: the upper bound, reached
    CP_SAT = "cp-sat"  # the exact search
    COUNTING = "counting"  # more units requested than are free
    GREEDY = "greedy"  # several plans: requests grown one by one (a plan, not a proof)
    NONE = "none"  # a request has no admissible split at all


class ConflictKind(StrEnum):
    """Why a resource type has no plan (condition reasons are CamelCase, as Kubernetes writes them)."""

    NO_SPLIT = "NoSplit"  # a request has no admissible split on these nodes
    OVERBOOKED = "Overbooked"  # the requests want more units than are free
    PACKING = "Packing"  # enough units, but no way to split and place them
    TIMEOUT = "TimedOut"  # no plan found within the time budget, not proven impossible

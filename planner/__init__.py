"""gpuplan's pure planning library.

No I/O happens in this package (the command line in :mod:`planner.cli` is the one exception and
only reads files and prints). Everything takes a frozen snapshot of nodes, free cards and requests
and returns values that carry their reasons, so the operator and the CLI render exactly the same
plan from the same input.
"""

from planner.errors import InvalidInput
from planner.model import PlanSpec, Snapshot
from planner.result import Allocation, PlanResult

__all__ = ["Allocation", "InvalidInput", "PlanResult", "PlanSpec", "Snapshot"]

"""A plain CP-SAT model of one bin-packing instance: the comparison the packing bench runs beside.

``python bench/binpack_cpsat.py INSTANCE BINS SECONDS`` prints one JSON line: ``packed`` (a packing
into ``BINS`` bins was found, and checked), ``refuted`` (proven that none exists) or neither.

The model is the textbook one a user would write: item ``i`` in bin ``b`` (booleans), each item in
one bin, each bin's load within the capacity (CP-SAT's own linear constraint), items sorted by
size with item ``i`` only in bins ``0..i`` (the usual symmetry breaking), one worker, seed 0.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def read(path: Path) -> tuple[int, list[int]]:
    """A BPPLIB instance: item count, capacity, one weight per line."""
    nums = [int(x) for x in path.read_text().split()]
    return nums[1], nums[2 : 2 + nums[0]]


def main() -> int:
    from ortools.sat.python import cp_model

    path, bins, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    start = time.monotonic()
    capacity, weights = read(path)
    weights.sort(reverse=True)
    m = cp_model.CpModel()
    x = {(i, b): m.new_bool_var(f"x{i}_{b}") for i in range(len(weights)) for b in range(min(bins, i + 1))}
    for i in range(len(weights)):
        m.add_exactly_one(x[i, b] for b in range(min(bins, i + 1)))
    for b in range(bins):
        m.add(sum(w * x[i, b] for i, w in enumerate(weights) if (i, b) in x) <= capacity)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(m)
    packed = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    if packed:  # check the packing: every item once, no bin over its capacity
        load = [0] * bins
        for (i, b), var in x.items():
            if solver.value(var):
                load[b] += weights[i]
        assert sum(load) == sum(weights) and max(load) <= capacity
    out = {"packed": packed, "refuted": status == cp_model.INFEASIBLE, "seconds": time.monotonic() - start}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run the seed's method (enumerate, sort, greedy check) on a plan and a node snapshot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from planner.model.options import build_problems
from planner.read.parse import parse_plan, snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the reference lives with the tests
from tests.bruteforce import seed_method


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = parse_plan(yaml.safe_load(f))
    with open(sys.argv[2]) as f:
        snap = snapshot(yaml.safe_load(f))
    found = seed_method(build_problems(spec, snap))
    # every combination is enumerated, so what it finds is the optimum (or there is no plan)
    print(
        json.dumps(
            {
                "feasible": found is not None,
                "optimal": True,
                "score": None if found is None else round(found[0], 6),
                "search": [{"method": "exhaustive"}],
            }
        )
    )


if __name__ == "__main__":
    main()

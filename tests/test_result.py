"""The one reader of the allocations JSON: what it accepts, and errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import InvalidInput
from planner.result import previous_placements, read_allocations

GOOD = {
    "operator": "face_1vn",
    "resource": "P4",
    "strategy": "machine",
    "instances": 2,
    "unitsPerInstance": 4,
    "nodes": {"p4-1": 1, "p4-0": 1},
}


def test_a_plan_output_reads_back_into_placements() -> None:
    (a,) = read_allocations([GOOD])
    assert a.units_total == 8 and a.nodes == (("p4-0", 1), ("p4-1", 1)) and a.term is None
    assert a.to_json() == GOOD | {"nodes": {"p4-0": 1, "p4-1": 1}}
    assert previous_placements((a,)) == {("face_1vn", "P4"): (4, {"p4-0": 1, "p4-1": 1})}


@pytest.mark.parametrize(
    ("value", "field"),
    [
        pytest.param("x", "allocations", id="not a list"),
        pytest.param([1], r"allocations\[0\]", id="an entry that is no object"),
        pytest.param([GOOD | {"operator": ""}], r"allocations\[0\]\.operator", id="an empty operator"),
        pytest.param(
            [{k: v for k, v in GOOD.items() if k != "nodes"}], r"allocations\[0\]\.nodes", id="no nodes"
        ),
        pytest.param(
            [GOOD | {"unitsPerInstance": 0}], r"allocations\[0\]\.unitsPerInstance", id="zero units"
        ),
        pytest.param(
            [GOOD | {"instances": 3}],
            r"allocations\[0\]\.nodes: holds 2 instances, not 3",
            id="counts disagree",
        ),
        pytest.param([GOOD | {"strategy": "fastest"}], r"allocations\[0\]\.strategy", id="unknown strategy"),
        pytest.param(
            [GOOD, GOOD | {"nodes": {"p4-0": True}}], r"allocations\[1\]\.nodes\.p4-0", id="a bool count"
        ),
    ],
)
def test_bad_allocations_name_the_field(value: Any, field: str) -> None:
    with pytest.raises(InvalidInput, match=f"^{field}"):
        read_allocations(value)

"""The one reader of the allocations JSON: what it accepts, and errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from planner.base.errors import InvalidInput
from planner.model.result import Placement, previous_placements
from planner.read.allocations import read_allocations

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
    assert previous_placements((a,)) == {("face_1vn", "P4"): Placement(4, {"p4-0": 1, "p4-1": 1}, {})}


def test_devices_read_back_so_a_re_plan_can_keep_them() -> None:
    doc = GOOD | {
        "devices": {
            "p4-0": [["gpu-0", "gpu-1", "gpu-2", "gpu-3"]],
            "p4-1": [["gpu-4", "gpu-5", "gpu-6", "gpu-7"]],
        },
        "straddling": 0,
    }
    (a,) = read_allocations([doc])
    assert a.to_json() == doc | {"nodes": {"p4-0": 1, "p4-1": 1}}
    assert previous_placements((a,))[("face_1vn", "P4")].devices == {
        "p4-0": [("gpu-0", "gpu-1", "gpu-2", "gpu-3")],
        "p4-1": [("gpu-4", "gpu-5", "gpu-6", "gpu-7")],
    }


@pytest.mark.parametrize(
    ("devices", "field"),
    [
        pytest.param(["gpu-0"], r"allocations\[0\]\.devices", id="not an object"),
        pytest.param(
            {"p4-9": [["a", "b", "c", "d"]]},
            r"allocations\[0\]\.devices\.p4-9",
            id="a node without instances",
        ),
        pytest.param({"p4-0": []}, r"allocations\[0\]\.devices\.p4-0", id="fewer lists than instances"),
        pytest.param(
            {"p4-0": [["a", "b"]]}, r"allocations\[0\]\.devices\.p4-0\[0\]", id="fewer devices than cards"
        ),
        pytest.param(
            {"p4-0": [["a", "b", "c", 4]]},
            r"allocations\[0\]\.devices\.p4-0\[0\]",
            id="a name that is no string",
        ),
    ],
)
def test_bad_devices_name_the_field(devices: Any, field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        read_allocations([GOOD | {"devices": devices}])


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

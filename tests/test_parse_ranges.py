"""Plan priority and ``{min, max}`` ranges as the readers take them, and every refusal naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from planner.base.errors import InvalidInput
from planner.model.spec import Request
from planner.read.parse import parse_plan
from tests.helpers import plan_doc


def requests_of(requests: dict[str, Any], **spec: Any) -> tuple[Request, ...]:
    return parse_plan(plan_doc(requests, **spec)).requests


def test_short_form_range() -> None:
    (r,) = requests_of({"face_feature_extract": {"P4": {"min": 4, "max": 8}}})
    assert (r.cards, r.least, r.minimum, r.elastic) == (8, 4, 4, True)


def test_long_form_range_with_machines() -> None:
    (r,) = requests_of(
        {"face_image_flow": {"resourceNum": {"P4": {"min": 2, "max": 6}}, "machineNum": {"P4": 2}}}
    )
    assert (r.cards, r.least, r.machines) == (6, 2, 2)


def test_a_number_is_a_fixed_range_and_equal_ends_are_fixed() -> None:
    a, b = requests_of({"face_1vn": {"P4": 3}, "face_feature_extract": {"P4": {"min": 5, "max": 5}}})
    assert (a.cards, a.minimum, a.elastic) == (3, None, False)
    assert (b.cards, b.minimum, b.elastic) == (5, None, False)


def test_min_zero_is_elastic_and_zero_zero_asks_nothing() -> None:
    (r,) = requests_of(
        {"face_1vn": {"P4": {"min": 0, "max": 4}}, "face_feature_extract": {"P4": {"min": 0, "max": 0}}}
    )
    assert (r.operator, r.least, r.cards) == ("face_1vn", 0, 4)


def test_priority_defaults_to_zero_and_is_read() -> None:
    assert parse_plan(plan_doc({"face_1vn": {"P4": 1}})).priority == 0
    assert parse_plan(plan_doc({"face_1vn": {"P4": 1}}, priority=1000)).priority == 1000


@pytest.mark.parametrize(
    ("requests", "spec", "field"),
    [
        ({"face_1vn": {"P4": {"min": 5, "max": 4}}}, {}, "requests.face_1vn.P4.min"),
        ({"face_1vn": {"P4": {"min": -1, "max": 4}}}, {}, "requests.face_1vn.P4.min"),
        ({"face_1vn": {"P4": {"min": 1, "max": 100_001}}}, {}, "requests.face_1vn.P4.max"),
        ({"face_1vn": {"P4": {"min": 1}}}, {}, "requests.face_1vn.P4.max"),
        ({"face_1vn": {"P4": {"max": 2}}}, {}, "requests.face_1vn.P4.min"),
        ({"face_1vn": {"P4": {"min": 1, "max": 2, "step": 1}}}, {}, "requests.face_1vn.P4.step"),
        ({"face_1vn": {"P4": {"min": "a", "max": 2}}}, {}, "requests.face_1vn.P4.min"),
        (
            {"face_1vn": {"resourceNum": {"P4": {"min": 3, "max": 6}}, "machineNum": {"P4": 2}}},
            {},
            "requests.face_1vn.resourceNum.P4.min",
        ),
        (
            {"face_1vn": {"resourceNum": {"P4": {"min": 2, "max": 5}}, "machineNum": {"P4": 2}}},
            {},
            "requests.face_1vn",
        ),
        ({"face_1vn": {"P4": 1}}, {"priority": 1001}, "priority"),
        ({"face_1vn": {"P4": 1}}, {"priority": -1}, "priority"),
        ({"face_1vn": {"P4": 1}}, {"priority": "high"}, "priority"),
        ({"face_1vn": {"P4": 1}}, {"priority": True}, "priority"),
    ],
)
def test_bad_input_names_the_field(requests: dict[str, Any], spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_plan(plan_doc(requests, **spec))
    assert e.value.field == field


def test_the_products_json_keeps_fixed_counts() -> None:
    doc = {"ragnaros_operator_config": {"face_1vn": {"P4": {"min": 1, "max": 2}}}}
    with pytest.raises(InvalidInput) as e:
        parse_plan(doc)
    assert e.value.field == "requests.face_1vn.P4"
    assert parse_plan({"ragnaros_operator_config": {"face_1vn": {"P4": 2}}}).requests[0].cards == 2


def test_priority_classes_rank_plan_priority_before_cards() -> None:
    from planner.base.vocab import priority_class_name, priority_value

    assert priority_class_name(8) == "ragnaros-cluster-critical-8" == priority_class_name(8, 0)
    assert priority_value(8) == 800_008_000
    ladder = [(p, u) for p in (0, 1, 2, 500, 999, 1000) for u in (0, 1, 8, 16, 198)]
    values = [priority_value(u, priority=p) for p, u in ladder]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert max(values) < 1_000_000_000
    assert priority_class_name(4, 500) != priority_class_name(4, 0)

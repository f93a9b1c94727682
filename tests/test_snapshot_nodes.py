"""Reading nodes and choosing a type's nodes: the indexed paths answer as a plain scan does.

The snapshot finds a type's nodes through an index of label values and reads allocatable values
through a cache of strings seen before; both are checked here against the plain definition on
random clusters (labels, several selector pairs, taints, cordons, YAML numbers as labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.base.errors import InvalidInput
from planner.base.once import once
from planner.model.spec import Node, ResourceKind, ResourceType, Snapshot, Taint, Toleration
from planner.read.parse import parse_nodes, snapshot

KEYS = ("type", "zone", "pool")
VALUES = ("a", "b", "c")


def plain_usable(
    snap: Snapshot, resource: ResourceType | None, tolerations: tuple[Toleration, ...]
) -> list[Node]:
    """The definition: schedulable, selected, no untolerated NoSchedule/NoExecute taint; by name."""
    out = [
        n
        for n in snap.nodes
        if not n.unschedulable
        and (resource is None or all(dict(n.labels).get(k) == v for k, v in resource.node_selector))
        and not any(
            t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in tolerations)
            for t in n.taints
        )
    ]
    return sorted(out, key=lambda n: n.name)


nodes = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
        st.booleans(),
        st.sampled_from(["", "NoSchedule", "PreferNoSchedule"]),
    ),
    max_size=12,
)
selectors = st.lists(
    st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), max_size=2, unique_by=lambda p: p[0]
)


@settings(max_examples=300, deadline=None)
@given(nodes, selectors, st.booleans(), st.randoms(use_true_random=False))
def test_a_types_nodes_are_those_a_plain_scan_finds(
    drawn: list[tuple[dict[str, str], bool, str]], selector: list[tuple[str, str]], tolerate: bool, rng: Any
) -> None:
    made = [
        Node(
            f"n{rng.randrange(100):02d}-{i}",
            tuple(sorted(labels.items())),
            (("gpu", 4),),
            unschedulable=cordoned,
            taints=(Taint("gpu", None, effect),) if effect else (),
        )
        for i, (labels, cordoned, effect) in enumerate(drawn)
    ]
    snap = Snapshot(tuple(made))
    tolerations = (Toleration("gpu", "Exists", None, None),) if tolerate else ()
    resource = ResourceType("t", ResourceKind.GPU, "gpu", tuple(selector))
    for res in (resource, None):
        assert snap.usable(res, tolerations) == plain_usable(snap, res, tolerations)
    assert snap.labelled(resource) == any(all(n.label_map.get(k) == v for k, v in selector) for n in made)


def node(name: str, labels: dict[Any, Any], alloc: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "status": {"allocatable": alloc}}


def test_labels_and_quantities_read_as_before() -> None:
    doc = {
        "kind": "List",
        "items": [
            node("a", {"z": "1", "b": "x"}, {"cpu": "63770m", "nvidia.com/gpu": "8"}),
            node("b", {"rack": 7, 3: True}, {"cpu": "63770m", "nvidia.com/gpu": 8}),  # YAML numbers
            node("c", {}, {"cpu": "2", "memory": "1Ki"}),
        ],
    }
    a, b, c = parse_nodes(doc)
    assert a.labels == (("b", "x"), ("z", "1"))
    assert b.labels == (("3", "True"), ("rack", "7"))
    assert a.allocatable == (("cpu", 63770), ("nvidia.com/gpu", 8)) == b.allocatable
    assert c.allocatable == (("cpu", 2000), ("memory", 1024))
    # nodes with nothing added are the nodes as read
    assert snapshot(doc).nodes == (a, b, c)


def test_a_bad_quantity_names_its_node_even_when_the_string_was_seen() -> None:
    doc = {
        "kind": "List",
        "items": [node("a", {}, {"nvidia.com/gpu": "8"}), node("b", {}, {"nvidia.com/gpu": "-1"})],
    }
    with pytest.raises(InvalidInput) as e:
        parse_nodes(doc)
    assert e.value.field == "nodes.items[1].status.allocatable.nvidia.com/gpu"
    with pytest.raises(InvalidInput) as e:
        parse_nodes({"kind": "List", "items": [node("a", {}, {}), {"kind": "Node", "metadata": "n"}]})
    assert e.value.field == "nodes.items[1].metadata"


def test_a_node_listed_twice_is_refused_naming_both_items() -> None:
    """Two items of one name (lists joined by hand) are one node: planning on both would count
    its cards twice (and the placement's index of free cards would not hold)."""
    doc = {"kind": "List", "items": [node(n, {}, {"nvidia.com/gpu": "8"}) for n in ("a", "b", "a")]}
    with pytest.raises(InvalidInput) as e:
        parse_nodes(doc)
    assert e.value.field == "nodes.items[2].metadata.name"
    assert "'a' is also items[0]" in str(e.value)


@dataclass(frozen=True)
class Frozen:
    x: int
    calls: list[int]

    @once
    def doubled(self) -> int:
        self.calls.append(1)
        return 2 * self.x


def test_once_works_out_a_value_once_on_a_frozen_dataclass() -> None:
    f = Frozen(3, [])
    assert f.doubled == 6 and f.doubled == 6
    assert f.calls == [1]
    assert Frozen(3, [1]) == f  # the kept value is not a field
    assert isinstance(Frozen.doubled, once)

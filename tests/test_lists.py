"""The fast reader of large node and pod lists gives the generic reader's answer, cut down.

Every test here lowers :data:`gpuplan.lists.LARGE` to 0 (and the YAML chunk to a few items), so
small documents take the fast path; the answer must equal the generic reader's document with
each item pruned to the fields the planner reads, and so the same snapshot or the same error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan import lists
from gpuplan.documents import load
from gpuplan.fields import NODE_FIELDS, POD_FIELDS, prune
from gpuplan.lists import read_list
from planner.base.errors import InvalidInput
from planner.read.parse import snapshot

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import kubectl_nodes  # noqa: E402

# strings YAML 1.1 (PyYAML) and JSON read differently when unquoted, and some that only look so
TRICKY = ["yes", "No", "on", "True", "true", "~", "null", "Null", "", "0x10", "010", "1_000", "1e3",
          "1.5", "8", "-0", "+5", ".inf", "NaN", "2024-01-01", "=", "a: b", "#x", "- x", "x\ny", "é", "'q'", '"d"']  # fmt: skip
scalars = (
    st.sampled_from(TRICKY)
    | st.text(max_size=6)
    | st.integers(-5, 10**6)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.dates()
)
keys = st.sampled_from(TRICKY) | st.text(max_size=6)
node = st.fixed_dictionaries(
    {
        "apiVersion": st.just("v1"),
        "kind": st.sampled_from(["Node", "Node", "Node", "Other"]),
        "metadata": st.fixed_dictionaries(
            {
                "name": st.text(min_size=1, max_size=8) | scalars,
                "labels": st.dictionaries(keys, scalars, max_size=4),
                "annotations": st.dictionaries(keys, scalars, max_size=2),
            }
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "unschedulable": scalars,
                "taints": st.lists(
                    st.dictionaries(st.sampled_from(["key", "value", "effect"]), scalars), max_size=2
                ),
            },
        ),
        "status": st.fixed_dictionaries(
            {
                "allocatable": st.dictionaries(
                    st.sampled_from(["cpu", "nvidia.com/gpu", "pods"]) | keys, scalars, max_size=3
                ),
                "conditions": st.lists(st.dictionaries(keys, scalars, max_size=2), max_size=2),
            }
        ),
    }
)
container = st.fixed_dictionaries(
    {
        "name": st.text(max_size=4),
        "resources": st.dictionaries(
            st.sampled_from(["limits", "requests"]), st.dictionaries(keys, scalars, max_size=2)
        ),
    }
)
pod = st.fixed_dictionaries(
    {
        "kind": st.just("Pod"),
        "metadata": st.fixed_dictionaries({"name": st.text(max_size=5)}),
        "spec": st.fixed_dictionaries(
            {
                "nodeName": st.sampled_from(["n0", "n1", "8"]) | scalars,
                "containers": st.lists(container, max_size=2),
            },
            optional={"initContainers": st.lists(container, max_size=1)},
        ),
        "status": st.fixed_dictionaries(
            {"phase": st.sampled_from(["Running", "Succeeded", "Pending"]) | scalars}
        ),
    }
)


@pytest.fixture(autouse=True, params=["one process", "a worker beside"])
def every_list_is_large(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every list read as a large one, its chunks by this process alone or shared with a forked
    worker (which chunks each reads then depends on the timing: the answer must not)."""
    monkeypatch.setattr(lists, "LARGE", 0)
    monkeypatch.setattr(lists, "CHUNK", 3)
    monkeypatch.setattr(lists, "WORKER", request.param == "a worker beside")
    yield


def write(doc: Any, fmt: str) -> bytes:
    if fmt == "yaml":
        return yaml.safe_dump(doc, allow_unicode=True).encode()
    return json.dumps(doc, indent=4 if fmt == "json" else None, default=str).encode()


def expected(data: bytes, fields: Any) -> Any:
    whole = load_text(data)
    return {**whole, "items": [prune(i, fields) for i in whole["items"]]}


def load_text(data: bytes) -> Any:
    from gpuplan.documents import one, parse

    return one(parse(data.decode(), "f", "nodes"), "f", "nodes")


def outcome(doc: Any, what: str) -> Any:
    try:
        return snapshot(doc) if what == "nodes" else snapshot({"kind": "List", "items": []}, doc)
    except InvalidInput as e:
        return str(e)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(node, min_size=1, max_size=7), fmt=st.sampled_from(["yaml", "json", "compact"]))
def test_a_node_list_reads_as_the_generic_reader_reads_it(items: list[Any], fmt: str) -> None:
    data = write(
        {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}, fmt
    )
    fast = read_list(data, "f", "nodes", NODE_FIELDS)
    assert fast == expected(data, NODE_FIELDS)
    assert outcome(fast, "nodes") == outcome(load_text(data), "nodes")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(pod, min_size=1, max_size=6), fmt=st.sampled_from(["yaml", "json"]))
def test_a_pod_list_reads_as_the_generic_reader_reads_it(items: list[Any], fmt: str) -> None:
    data = write({"apiVersion": "v1", "items": items, "kind": "List"}, fmt)
    fast = read_list(data, "f", "pods", POD_FIELDS)
    assert fast == expected(data, POD_FIELDS)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_kubectl_nodes_and_the_examples_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    path = tmp_path / f"nodes.{fmt}"
    kubectl_nodes.write(str(path), {"P4": 5, "T4": 4}, [0, 3, 8], fmt)
    data = path.read_bytes()
    with monkeypatch.context() as m:  # kubectl's output never needs the generic reader

        def generic(*args: Any) -> Any:
            raise AssertionError("read by the generic reader")

        m.setattr(lists, "read_generic", generic)
        fast = read_list(data, "f", "nodes", NODE_FIELDS)
    assert fast == expected(data, NODE_FIELDS)
    assert len(fast["items"]) == 9 and "images" not in json.dumps(fast)
    for name, fields in (("nodes", NODE_FIELDS), ("pods", POD_FIELDS)):
        example = (REPO / "examples" / f"{name}.yaml").read_bytes()
        assert read_list(example, "f", name, fields) == expected(example, fields)


NODES_YAML = """\
apiVersion: v1
items:
- kind: Node
  metadata: {name: a}
- kind: Node
  metadata:
    name: b
    labels:
      gpu: P4
      zone: z1
      gpu: T4
- kind: Node
  metadata: {name: c}
kind: List
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            NODES_YAML,
            'nodes: f: line 11: mapping key "gpu" already defined at line 9',
            id="in YAML, a label given twice in the second item names its lines in the file",
        ),
        pytest.param(
            NODES_YAML.replace("    name: b\n", "    name: b\n    images: {x: 1, x: 2}\n"),
            'nodes: f: line 8: mapping key "x" already defined at line 8',
            id="in YAML, a key given twice in a field the Node schema does not know is refused too",
        ),
        pytest.param(
            NODES_YAML.replace("kind: List\n", "kind: List\nkind: NodeList\n"),
            'nodes: f: line 15: mapping key "kind" already defined at line 14',
            id="in YAML, the list's own kind given twice is refused",
        ),
        pytest.param(
            json.dumps({"items": [{"kind": "Node", "metadata": {"name": "a"}}]}, indent=2).replace(
                '"name": "a"', '"name": "a",\n "name": "b"'
            ),
            'nodes: f: line 7: mapping key "name" already defined at line 6',
            id="in JSON, a node's name given twice is refused",
        ),
        pytest.param(
            '{"items": [],\n "items": [{"kind": "Node"}]}',
            'nodes: f: line 2: mapping key "items" already defined at line 1',
            id="in JSON, the items given twice are refused",
        ),
    ],
)
def test_a_key_given_twice_is_refused_by_the_fast_reader(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        read_list(text.encode(), "f", "nodes", NODE_FIELDS)
    assert str(e.value) == message


NODES_OK = NODES_YAML.replace("      gpu: T4\n", "")
INDENTED = """\
items:
  - kind: Node
    metadata: {name: a}
  - kind: Node
    metadata: {name: b}
kind: List
"""


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(NODES_OK + "x: &a 1\ny: *a\n", id="anchors and aliases"),
        pytest.param("---\n" + NODES_OK, id="a document marker"),
        pytest.param(INDENTED, id="items indented under their key"),
        pytest.param(NODES_OK.replace("zone: z1", "zone: !!str z1"), id="a tag"),
        pytest.param(
            NODES_OK.replace("zone: z1", 'zone: "a\n- kind: Node\n  b"'),
            id="a quoted string with a line that looks like an item",
        ),
    ],
)
def test_what_the_fast_reader_does_not_expect_goes_to_the_generic_reader(text: str) -> None:
    data = text.encode()
    assert read_list(data, "f", "nodes", NODE_FIELDS) == expected(data, NODE_FIELDS)


def test_a_small_list_is_read_by_the_generic_reader_and_cut_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lists, "LARGE", 1 << 20)
    data = NODES_OK.encode()
    labels = read_list(data, "f", "nodes", NODE_FIELDS)["items"][1]["metadata"]["labels"]
    assert labels == {"gpu": "P4", "zone": "z1"}
    assert read_list(data, "f", "nodes", NODE_FIELDS) == expected(data, NODE_FIELDS)
    (tmp_path / "nodes.yaml").write_bytes(data)
    assert load(str(tmp_path / "nodes.yaml"), "nodes") == load_text(data)


def test_json_written_longer_than_thrice_its_yaml_is_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    data = ("items:\n" + "- a:\n  b:\n" * 5 + "kind: List\n").encode()
    monkeypatch.setattr(lists, "read_generic", lambda *args: pytest.fail("read by the generic reader"))
    assert read_list(data, "f", "nodes", NODE_FIELDS) == {"kind": "List", "items": [{}] * 5}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(NODES_OK.replace("zone: z1", "zone: @z1"), id="a scalar starting with the reserved @"),
        pytest.param(NODES_OK.replace("zone: z1", "zone: a: b"), id="two colons on one line"),
        pytest.param(NODES_OK.replace("zone: z1", "zone: [z1"), id="an unclosed bracket"),
    ],
)
def test_yaml_the_generic_reader_refuses_is_refused_in_one_line_and_nothing_else(
    capfd: pytest.CaptureFixture[str], text: str
) -> None:
    with pytest.raises(InvalidInput) as fast:
        read_list(text.encode(), "f", "nodes", NODE_FIELDS)
    with pytest.raises(InvalidInput) as generic:
        load_text(text.encode())
    assert str(fast.value) == str(generic.value)
    assert capfd.readouterr().err == ""  # rapidyaml's own error report goes nowhere


def read_or_refuse(read: Any) -> Any:
    try:
        return read()
    except InvalidInput as e:
        return str(e)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=st.text(alphabet="ab1: -#'\"@`!&*|>{}[],?%~.\\\n\t\ré", max_size=12),
    where=st.sampled_from(["zone: {}", "{}: z1", "zone: [{}]", "zone: {{a: {}}}", "zone:\n        {}"]),
)
def test_any_text_typed_into_a_node_reads_or_fails_as_the_generic_reader(raw: str, where: str) -> None:
    """Text as a person may type it into a node (a value, a key, in brackets, on the next line):
    valid YAML or not, the same answer."""
    data = NODES_OK.replace("zone: z1", where.format(raw)).encode()
    fast = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    assert fast == read_or_refuse(lambda: expected(data, NODE_FIELDS))


@pytest.mark.parametrize(
    "item",
    [
        {"kind": "Node", "metadata": None, "spec": "x", "status": {"allocatable": [1]}},
        {"kind": "Node", "metadata": {"name": "a", "labels": [1, 2]}, "spec": None, "status": 3},
        {"kind": "Pod", "spec": {"containers": {"a": 1}, "initContainers": None}, "status": None},
        {"kind": "Pod", "spec": {"containers": [None, 3, {"resources": "r", "x": 1}]}},
    ],
)
def test_values_of_another_shape_are_kept_whole_as_prune_keeps_them(item: Any) -> None:
    """A kept field whose value has another shape than expected is kept whole, as prune keeps
    it on the generic reader's document (for the planner to refuse, naming the field)."""
    fine = {"kind": "Node", "metadata": {"name": "b"}, "status": {"allocatable": {"cpu": "1"}}}
    for fields in (NODE_FIELDS, POD_FIELDS):
        data = write({"kind": "List", "items": [fine, item, fine]}, "json")
        assert read_list(data, "f", "nodes", fields) == expected(data, fields)


# --- JSON node lists read by the Node's schema (gpuplan.nodes_json) --------------------------------

NODE_JSON = {
    "kind": "Node",
    "metadata": {"name": "a", "labels": {"gpu": "P4"}, "annotations": {"x": "1"}},
    "spec": {"unschedulable": True},
    "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready"}]},
}


def node_list_json(replace: tuple[str, str] | None = None, **extra: Any) -> bytes:
    text = json.dumps({"kind": "List", "items": [NODE_JSON, NODE_JSON | extra]}, indent=2)
    return (text.replace(*replace, 1) if replace else text).encode()


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        pytest.param(
            ('"gpu": "P4"', '"gpu": "P4",\n"gpu": "T4"'),
            'line 10: mapping key "gpu" already defined at line 9',
            id="a label",
        ),
        pytest.param(
            ('"spec": {', '"spec": {},\n"spec": {'),
            'line 16: mapping key "spec" already defined at line 15',
            id="a record of the Node",
        ),
        pytest.param(
            ('"name": "a",', '"name": "a",\n"name": "b",'),
            'line 8: mapping key "name" already defined at line 7',
            id="a field of a record",
        ),
        pytest.param(
            ('"kind": "List"', '"kind": "List",\n"kind": "NodeList"'),
            'line 3: mapping key "kind" already defined at line 2',
            id="the list's own field",
        ),
    ],
)
def test_json_nodes_read_by_their_schema_still_refuse_a_key_given_twice(
    replace: tuple[str, str], message: str
) -> None:
    """msgspec keeps the last of two values; the colons that no longer add up send the file to the
    item reader, which names the key and both lines."""
    with pytest.raises(InvalidInput) as e:
        read_list(node_list_json(replace), "f", "nodes", NODE_FIELDS)
    assert str(e.value) == f"nodes: f: {message}"


def test_json_nodes_with_a_field_the_schema_does_not_know_read_the_same() -> None:
    data = node_list_json(extraField={"a": 1, "b": [1, 2]})
    assert read_list(data, "f", "nodes", NODE_FIELDS) == expected(data, NODE_FIELDS)
    escaped = node_list_json(('"gpu": "P4"', '"gpu": "P4\\u003a"'))
    assert read_list(escaped, "f", "nodes", NODE_FIELDS) == expected(escaped, NODE_FIELDS)


def test_nodes_read_by_the_schema_do_not_look_for_a_key_given_twice_where_the_planner_never_reads() -> None:
    """Inside an annotation or a condition a key given twice changes no plan; looking for it would
    mean decoding everything the schema skips. The generic reader (small files) still refuses it."""
    data = node_list_json(('"x": "1"', '"x": "1", "x": "2"'))
    yaml_data = b"items:\n- kind: Node\n  metadata:\n    annotations:\n      x: 1\n      x: 2\n    name: a\nkind: List\n"
    for text in (data, yaml_data):
        fast = read_list(text, "f", "nodes", NODE_FIELDS)
        assert fast == expected(text.replace(b"      x: 2\n", b"").replace(b', "x": "2"', b""), NODE_FIELDS)
        with pytest.raises(InvalidInput, match="already defined"):
            load_text(text)


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=" \n\r\t,[]{}@`%:?a.é", max_size=24))
def test_a_reserved_start_is_found_with_or_without_brackets_as_by_the_roles(text: str) -> None:
    """The search on the bytes as they are (no bracket or brace in the text) finds what the
    search on every byte's role finds."""
    data = text.encode()
    roles = data.replace(b"[]", b"..").replace(b"{}", b"..").translate(lists._ROLES)
    assert lists._reserved_start(data) == any(pair in roles for pair in lists._RESERVED_PAIRS)


STEP = 1 << 16


@pytest.mark.parametrize("size", [0, 1, STEP - 1, STEP, STEP + 1, 3 * STEP - 1, 3 * STEP + 7])
@pytest.mark.parametrize("fill", [b" ", b"\xff", b";"])
def test_the_colon_count_counts_what_bytes_count_does_across_its_steps(size: int, fill: bytes) -> None:
    """nodes_json.colons compares 64 KB at a time: colons on either side of a step, at the very
    first and last byte, scattered, and none at all are all counted."""
    from gpuplan.nodes_json import colons

    data = bytearray(fill * size)
    assert colons(bytes(data)) == 0
    for i in (0, size - 1, STEP - 1, STEP, 2 * STEP - 1, 2 * STEP, *range(5, size, 9973)):
        if 0 <= i < size:
            data[i] = 58
    text = bytes(data)
    assert colons(text) == text.count(b":") == colons(text, vectorized=False)


@pytest.mark.parametrize("numpy_from", [0, None])
@pytest.mark.parametrize("shift", [-6, -5, -3, -1, 0, 1])
def test_a_key_given_twice_beside_an_escaped_colon_is_refused_wherever_the_escape_falls(
    shift: int, numpy_from: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's fields are decoded and written back: an escaped colon (``\\u003a``) there
    comes back as a colon, one more, which would hide the one a key given twice takes away. The
    escape is looked for in the 64 KB steps that hold a backslash, also when it runs into the
    next step (counted by numpy, as a list of ``NUMPY_FROM`` bytes is; by bytes.count below)."""
    from gpuplan import nodes_json

    if numpy_from is not None:
        monkeypatch.setattr(nodes_json, "NUMPY_FROM", numpy_from)
    twice = ('"gpu": "P4"', '"gpu": "P4",\n"zone\\u003a": "a",\n"gpu": "T4"')

    def padded_by(pad: int) -> bytes:
        doc = {"kind": "List", "metadata": {"pad": "x" * pad}, "items": [NODE_JSON, NODE_JSON]}
        return json.dumps(doc, indent=2).replace(*twice, 1).encode()

    padded = padded_by(STEP + shift - padded_by(0).index(b"\\u003a"))
    assert padded.index(b"\\u003a") == STEP + shift
    with pytest.raises(InvalidInput, match='mapping key "gpu" already defined'):
        read_list(padded, "f", "nodes", NODE_FIELDS)
    fine = padded.replace(b'"gpu": "T4"', b'"zone": "T4"')
    assert read_list(fine, "f", "nodes", NODE_FIELDS) == expected(fine, NODE_FIELDS)


@pytest.mark.parametrize(
    "name", ['{"x": 1, "x": 2}', '[{"x": 1, "x": 2}]', '{"x": {"y": 1, "y": 2}}', '"p4\\u003a"', "null", "7"]
)
def test_a_node_name_of_any_shape_reads_as_the_generic_reader_reads_it(name: str) -> None:
    """Node names are decoded apart from the rest (side by side in memory): a key given twice
    inside one is still refused as the generic reader refuses it, any other value kept as it is."""
    data = node_list_json(('"name": "a"', f'"name": {name}'))
    fast = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    assert fast == read_or_refuse(lambda: expected(data, NODE_FIELDS))

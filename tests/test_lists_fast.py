"""The large-YAML reader's shortcuts: document markers found among the lines at the margin,
rare bytes found in each chunk's role pass, a chunk's reading checked a level at a time; the
answer, or the error, stays the generic reader's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan import lists
from gpuplan.fields import NODE_FIELDS
from gpuplan.lists import read_list
from tests.test_lists import TRICKY, expected, read_or_refuse


@pytest.fixture(autouse=True, params=["one process", "a worker beside"])
def every_list_is_large(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every list read as a large one, its chunks by this process alone or shared with a forked
    worker (which chunks each reads then depends on the timing: the answer must not)."""
    monkeypatch.setattr(lists, "LARGE", 0)
    monkeypatch.setattr(lists, "CHUNK", 2)
    monkeypatch.setattr(lists, "WORKER", request.param == "a worker beside")
    yield


def node(name: str, zone: str = "z1") -> str:
    return f"- kind: Node\n  metadata:\n    name: {name}\n    labels:\n      zone: {zone}\n"


NODES = "apiVersion: v1\nitems:\n" + "".join(node(f"n{i}") for i in range(9)) + "kind: List\n"


def places(marker: str) -> list[str]:
    """``marker`` at the margin before the items, at the first item, between two, in an item's
    value, after the items and at the end."""
    second = NODES.index("- kind: Node", NODES.index("items:\n") + 8)
    return [
        marker + "\n" + NODES,
        NODES.replace("items:\n", f"items:\n{marker}\n", 1),
        NODES[:second] + marker + "\n" + NODES[second:],
        NODES.replace("      zone: z1\n", f"      zone: |\n{marker}\n", 1),
        NODES.replace("kind: List\n", f"{marker}\nkind: List\n"),
        NODES + marker + "\n",
        NODES.replace(
            "- kind: Node\n  metadata:\n    name: n4", f"-{marker[1:]} kind: Node\n  metadata:\n    name: n4"
        ),
    ]


@pytest.mark.parametrize("marker", ["---", "--- ", "...", "%YAML 1.1", "---x", "--", "-x"])
def test_a_marker_at_the_margin_anywhere_reads_or_fails_as_the_generic_reader(marker: str) -> None:
    for text in places(marker):
        data = text.encode()
        fast = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))  # noqa: B023
        assert fast == read_or_refuse(lambda: expected(data, NODE_FIELDS)), text  # noqa: B023


def test_a_document_marker_among_the_items_goes_to_the_generic_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not parsed in chunks: a chunk holding ``---`` would be read as two documents by rapidyaml."""
    for text in places("---")[1:3]:
        with pytest.raises(lists._Generic):
            lists._from_yaml(text.encode(), "f", "nodes", NODE_FIELDS)


@pytest.mark.parametrize(
    "value",
    ["&a z1", "*a", "!!str z1", "z1\n      <<: {a: 1}", "\tz1", "a < b", "a!b", "'a&b'", "[a, *b]"],
)
@pytest.mark.parametrize("node_at", [0, 4, 8])
def test_an_anchor_tag_merge_or_tab_in_any_chunk_reads_or_fails_as_the_generic_reader(
    value: str, node_at: int
) -> None:
    text = NODES.replace(
        f"name: n{node_at}\n    labels:\n      zone: z1",
        f"name: n{node_at}\n    labels:\n      zone: {value}",
    )
    data = text.encode()
    fast = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    assert fast == read_or_refuse(lambda: expected(data, NODE_FIELDS)), text


@pytest.mark.parametrize("name", ["&x n8", "*x", "!!str n8", "n8\t", "n8\n    <<: {a: 1}"])
def test_an_anchor_tag_merge_or_tab_in_a_later_chunk_sends_the_file_to_the_generic_reader(name: str) -> None:
    """As they did when the whole file was searched first (tabs: the two parsers differ on some)."""
    data = NODES.replace("name: n8\n", f"name: {name}\n").encode()
    with pytest.raises(lists._Generic):
        lists._from_yaml(data, "f", "nodes", NODE_FIELDS)


@pytest.mark.parametrize("later", ["name: &x n8", "name: n8\t", "name: !!str n8", "name: *x"])
@pytest.mark.parametrize("twice", ["name: n1\n    name: z", "name: n1\n    labels:\n      a: 1\n      a: 2"])
def test_a_key_given_twice_before_an_alias_or_tag_fails_as_the_generic_reader(later: str, twice: str) -> None:
    """The generic reader reports an undefined alias before an earlier key given twice."""
    data = NODES.replace("name: n1", twice, 1).replace("name: n8", later).encode()
    fast = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    assert fast == read_or_refuse(lambda: expected(data, NODE_FIELDS))


values = st.recursive(
    st.sampled_from(TRICKY)
    | st.text(max_size=3)
    | st.integers(-3, 3)
    | st.booleans()
    | st.none()
    | st.floats(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(TRICKY) | st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(items=st.lists(values, max_size=5))
def test_a_chunk_reads_the_same_exactly_when_each_of_its_items_does(items: list[Any]) -> None:
    lists._OK_KEYS.clear()
    lists._OK_VALUES.clear()
    each = all(map(lists._yaml_reads_the_same, items))
    lists._OK_KEYS.clear()
    lists._OK_VALUES.clear()
    assert lists._all_read_the_same(items) == each


# --- chunk by chunk, against the generic reader ---------------------------------------------


CASES = {
    "plain": NODES,
    "a date PyYAML reads as a date, late": NODES.replace("zone: z1", "zone: 2024-01-01").replace(
        "name: n1\n", "name: n1\n    annotations: {a: 1}\n"
    ),
    "a reserved start in a later chunk": NODES.replace(
        "name: n7", "name: n7\n    annotations:\n      a: '@x'"
    ),
    "an integer past 64 bits": NODES.replace("zone: z1", "zone: 123456789012345678901234567890"),
    "a key given twice in a later chunk": NODES.replace("name: n8\n", "name: n8\n    name: again\n"),
    "a key given twice in two chunks": NODES.replace("name: n1\n", "name: n1\n    name: x\n").replace(
        "name: n8\n", "name: n8\n    name: y\n"
    ),
    "a NEL in a quoted value, late": NODES.replace(
        "zone: z1\n- kind: Node\n  metadata:\n    name: n7",
        "zone: 'a\u0085  b'\n- kind: Node\n  metadata:\n    name: n7",
    ),
    "an LS in a quoted key": NODES.replace("      zone: z1\n", "      'z\u2028  x': z1\n", 1),
    "a PS in a plain value": NODES.replace(
        "zone: z1\n- kind: Node\n  metadata:\n    name: n3",
        "zone: a\u2029b\n- kind: Node\n  metadata:\n    name: n3",
    ),
    "a chunk rapidyaml refuses in a later chunk": NODES.replace(
        "zone: z1\n- kind: Node\n  metadata:\n    name: n8",
        "zone: [z1\n- kind: Node\n  metadata:\n    name: n8",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_chunked_read_gives_the_generic_readers_answer_or_error(name: str) -> None:
    data = CASES[name].encode()
    got = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    assert got == read_or_refuse(lambda: expected(data, NODE_FIELDS))


# --- the chunks shared with a worker ----------------------------------------------------------


class _Scripted:
    """A worker that sends the texts a forked one would, when its script says: ``send`` (the
    next text), ``later`` (nothing yet: this process reads a chunk from the back), ``stop``."""

    script: ClassVar[list[str]] = []

    def __init__(self, reader: Any, chunks: list[Any]) -> None:
        self.texts = [reader.json_text(c) for c in chunks]
        self.steps = iter(self.script)

    def __enter__(self) -> _Scripted:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def text(self) -> Any:
        step = next(self.steps, "stop")
        if step == "later":
            return lists._NOT_YET
        if step == "stop" or not self.texts:
            return lists._MISSING
        return self.texts.pop(0)


SCRIPTS = {
    "sends every text": ["send"] * 20,
    "sends none": ["later"] * 20,
    "takes turns": ["send", "later"] * 10,
    "late, then every text": ["later", "later", "send", "send", "send"],
    "stops after one": ["send"],
}


@pytest.mark.parametrize("script", list(SCRIPTS))
@pytest.mark.parametrize("name", list(CASES))
def test_however_the_worker_and_this_process_share_the_chunks_the_answer_or_error_is_the_same(
    name: str, script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which chunks the worker sends depends on the timing; the answer, and the error of the
    first chunk that fails (a key given twice in two chunks: the first is named, though this
    process may read the later one first), must not."""
    monkeypatch.setattr(lists, "WORKER", True)
    monkeypatch.setattr(_Scripted, "script", SCRIPTS[script])
    monkeypatch.setattr(lists, "_Worker", _Scripted)
    data = CASES[name].encode()
    got = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    assert got == read_or_refuse(lambda: expected(data, NODE_FIELDS))


@pytest.mark.parametrize("name", ["plain", "a key given twice in two chunks"])
def test_a_worker_that_dies_part_way_changes_nothing_and_is_reaped(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lists, "WORKER", True)
    here = os.getpid()
    real = lists._YamlChunks.json_text
    sent = [0]

    def dies_after_two(self: Any, chunk_at: Any) -> Any:
        if os.getpid() != here:
            sent[0] += 1
            if sent[0] > 2:
                os._exit(3)
        return real(self, chunk_at)

    forked: list[int] = []
    fork = os.fork

    def recorded_fork() -> int:
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(lists._YamlChunks, "json_text", dies_after_two)
    monkeypatch.setattr(os, "fork", recorded_fork)
    data = CASES[name].encode()
    got = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    assert got == read_or_refuse(lambda: expected(data, NODE_FIELDS))
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(forked[0], os.WNOHANG)


# --- a Node's status cut down to its allocatable in rapidyaml's tree ---------------------------

GPUS = 'allocatable:\n      nvidia.com/gpu: "8"\n      cpu: 1500m\n      pods: 110\n'
OTHER = "conditions:\n    - type: Ready\n      status: 'True'\n    images:\n    - names:\n      - a\n"
STATUSES = {
    "allocatable first": f"  status:\n    {GPUS}    {OTHER}",
    "allocatable last": f"  status:\n    {OTHER}    {GPUS}",
    "allocatable between": f"  status:\n    capacity:\n      cpu: 2\n    {GPUS}    {OTHER}",
    "no allocatable": f"  status:\n    {OTHER}",
    "allocatable null": f"  status:\n    {OTHER}    allocatable:\n",
    "allocatable a list": f"  status:\n    allocatable:\n    - 1\n    {OTHER}",
    "allocatable given twice": f"  status:\n    {GPUS}    {OTHER}    {GPUS}",
    "allocatable given twice, one empty": f"  status:\n    {GPUS}    allocatable: {{}}\n",
    "allocatable quoted": f"  status:\n    {OTHER}    'allocatable':\n      cpu: '4'\n",
    "allocatable escaped": f'  status:\n    {OTHER}    "\\x61llocatable":\n      cpu: "4"\n',
    "allocatable escaped, twice": f'  status:\n    {GPUS}    "\\x61llocatable":\n      cpu: "4"\n',
    "a status not a mapping": "  status:\n  - a\n  - b\n",
    "a status empty": "  status: {}\n",
    "a status null": "  status:\n",
    "a status given twice": f"  status:\n    {GPUS}  status:\n    {OTHER}",
    "an image given twice": f"  status:\n    {GPUS}    {OTHER}    images: []\n",
}


@pytest.mark.parametrize("case", list(STATUSES))
@pytest.mark.parametrize("node_at", [0, 3, 8])
def test_a_status_cut_to_its_allocatable_reads_as_the_generic_reader(case: str, node_at: int) -> None:
    """Whatever the status holds and wherever its allocatable is, the answer (or the error naming
    the key and its lines) is the generic reader's; but for a key given twice among the fields
    the planner never reads, which is not looked for."""
    status = STATUSES[case]
    text = NODES.replace(
        f"name: n{node_at}\n    labels:\n      zone: z1\n",
        f"name: n{node_at}\n    labels:\n      zone: z1\n{status}",
    )
    data = text.encode()
    assert status in text
    fast = read_or_refuse(lambda: read_list(data, "f", "nodes", NODE_FIELDS))
    if case == "an image given twice":
        # refused when the item is read again by PyYAML (here for its float), else read without it
        dropped = expected(text.replace("    images: []\n", "").encode(), NODE_FIELDS)
        assert fast in (dropped, read_or_refuse(lambda: expected(data, NODE_FIELDS)))
    else:
        assert fast == read_or_refuse(lambda: expected(data, NODE_FIELDS)), text


# --- the lines at the margin, found 64 KB at a time -------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(st.sampled_from("\n-# \t\r\f\vax:"), max_size=80).map(str.encode),
    start=st.integers(0, 80),
    step=st.integers(1, 9),
)
def test_the_lines_at_the_margin_are_those_a_regular_expression_finds(
    text: bytes, start: int, step: int
) -> None:
    """Every line whose first byte is not ``#`` or white space, after ``start``, in order, however
    the steps fall (across a step's last byte, at the text's end)."""
    import re

    with pytest.MonkeyPatch.context() as m:
        m.setattr(lists, "_MARGIN_STEP", step)
        found = list(lists._margin_lines(text, start))
    assert found == [start + line.start() + 1 for line in re.finditer(rb"\n[^#\s]", text[start:])] and all(
        at > start for at in found
    )

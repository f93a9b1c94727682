"""What the planner reads of a Node and of a Pod, and a node or pod list cut down to it.

A list of at least :data:`LARGE` bytes is read by the fast readers of :mod:`gpuplan.lists`
(msgspec, numpy, rapidyaml), imported only then; a smaller one by the generic reader
(:mod:`gpuplan.documents`), then cut down the same way. A plan on a small cluster so never
loads them: msgspec alone, with what it imports, was 6 ms of a 90 ms command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.documents import one, parse, read_bytes
from planner import InvalidInput

LARGE = 1 << 20  # bytes: below this the generic reader is as fast, and reads every field

# What planner.read.parse reads of a Node (parse_nodes) and of a Pod (snapshot, pod_is_active,
# pod_requests). None: the whole value; a dict: these keys of a mapping; a one-item list: each
# element so. A value of another shape than expected is kept whole, for the planner to refuse.
Fields = Mapping[str, Any] | list[Any] | None
NODE_FIELDS: Fields = {
    "kind": None,
    "metadata": {"name": None, "labels": None},
    "spec": {"taints": None, "unschedulable": None},
    "status": {"allocatable": None},
}
_CONTAINERS = [{"resources": None}]
POD_FIELDS: Fields = {
    "kind": None,
    "spec": {"nodeName": None, "containers": _CONTAINERS, "initContainers": _CONTAINERS},
    "status": {"phase": None},
}


def prune(value: Any, fields: Fields) -> Any:
    """``value`` with only ``fields`` kept (a value of another shape is kept whole)."""
    if fields is None:
        return value
    if isinstance(fields, list):
        return [prune(v, fields[0]) for v in value] if isinstance(value, list) else value
    if not isinstance(value, dict):
        return value
    return {k: value[k] if sub is None else prune(value[k], sub) for k, sub in fields.items() if k in value}


def load_list(path: str, what: str, fields: Fields) -> Any:
    """:func:`gpuplan.documents.load` for a node or pod list, each item cut down to ``fields``:
    ``path`` (``-``: standard input)."""
    data = read_bytes(path, what)
    source = "standard input" if path == "-" else path
    if len(data) >= LARGE:
        from gpuplan.lists import read_list

        return read_list(data, source, what, fields)
    return read_generic(data, source, what, fields)


def read_generic(data: bytes, source: str, what: str, fields: Fields) -> Any:
    """The list in ``data`` read by the generic reader, each item cut down to ``fields``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(what, f"{source}: not UTF-8 text") from None
    doc = one(parse(text, source, what), source, what)
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):  # the same answer, cut down
        return doc | {"items": [prune(item, fields) for item in doc["items"]]}
    return doc

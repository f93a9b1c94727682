"""Read a large JSON node list by the Node's schema: only what the planner reads is decoded.

Notes
-----
``kubectl get nodes -o json`` for 65,000 nodes is 370 MB, nine tenths of it annotations,
conditions, addresses, nodeInfo and images. Decoding every item whole (to find a key given
twice) costs seconds; here msgspec decodes the list into small typed records (:class:`_Node`)
in one call, each field of a Node kept as its raw JSON text (a slice of the input, nothing
decoded), and only the fields the planner reads (:data:`gpuplan.lists.NODE_FIELDS`) are then
decoded, all of one kind at once.

A key given twice is still refused, without decoding what the planner never reads:

- in the records (the list, a Node, its metadata, spec and status), msgspec keeps the last of
  two values of one field. Every colon of the file is the colon of a field of a record, or
  inside the raw text of a field's value; the records written back by msgspec (the fields not
  given left out, raw text as it was) hold them all, once each. When they hold fewer than the
  file, a key was given twice (or a field this reader does not know was skipped): the file goes
  to :func:`gpuplan.lists.read_list`'s item reader, which names the key and its lines;
- in the values the planner reads (labels, allocatable, taints), the values written back (one
  key each) hold fewer colons than their text exactly when a key was dropped.

Inside the values the planner never reads (an annotation, an image), a key given twice is not
looked for: it changes no plan, and finding it costs decoding them all.

A Node with a field this reader does not know, a record that is not a mapping (``metadata:
null``), or anything else unexpected goes to the item reader: slower, never different.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Raw, Struct


class Unexpected(Exception):
    """Not for this reader: the item reader reads it."""


_ABSENT = Raw()  # a field not given (a given one is never empty text, even null is `null`)


# Each record lists every field the API server writes (core/v1 Node, ObjectMeta, NodeSpec,
# NodeStatus, a List), each as its raw text (or _ABSENT). The planner's fields are named
# first: they are decoded, the rest is only counted.
class _Meta(Struct, gc=False, omit_defaults=True):
    name: Raw = _ABSENT
    labels: Raw = _ABSENT
    annotations: Raw = _ABSENT
    creationTimestamp: Raw = _ABSENT
    deletionGracePeriodSeconds: Raw = _ABSENT
    deletionTimestamp: Raw = _ABSENT
    finalizers: Raw = _ABSENT
    generateName: Raw = _ABSENT
    generation: Raw = _ABSENT
    managedFields: Raw = _ABSENT
    namespace: Raw = _ABSENT
    ownerReferences: Raw = _ABSENT
    resourceVersion: Raw = _ABSENT
    selfLink: Raw = _ABSENT
    uid: Raw = _ABSENT


class _Spec(Struct, gc=False, omit_defaults=True):
    taints: Raw = _ABSENT
    unschedulable: Raw = _ABSENT
    configSource: Raw = _ABSENT
    externalID: Raw = _ABSENT
    podCIDR: Raw = _ABSENT
    podCIDRs: Raw = _ABSENT
    providerID: Raw = _ABSENT


class _Status(Struct, gc=False, omit_defaults=True):
    allocatable: Raw = _ABSENT
    addresses: Raw = _ABSENT
    capacity: Raw = _ABSENT
    conditions: Raw = _ABSENT
    config: Raw = _ABSENT
    daemonEndpoints: Raw = _ABSENT
    declaredFeatures: Raw = _ABSENT
    features: Raw = _ABSENT
    images: Raw = _ABSENT
    nodeInfo: Raw = _ABSENT
    phase: Raw = _ABSENT
    runtimeHandlers: Raw = _ABSENT
    volumesAttached: Raw = _ABSENT
    volumesInUse: Raw = _ABSENT


class _Node(Struct, gc=False, omit_defaults=True):
    kind: Raw = _ABSENT
    metadata: _Meta | None = None
    spec: _Spec | None = None
    status: _Status | None = None
    apiVersion: Raw = _ABSENT


class _List(Struct, gc=False, omit_defaults=True):
    items: list[_Node] | None = None
    apiVersion: Raw = _ABSENT
    kind: Raw = _ABSENT
    metadata: Raw = _ABSENT


_LIST = msgspec.json.Decoder(_List)
_DECODE = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()
_HEAD = ("apiVersion", "kind", "metadata")  # the list's own fields beside its items
BATCH = 4096  # items written back at once to count their colons: a few MB
_STEP = 1 << 16  # bytes compared at once by colons(): stays in the first-level cache


def colons(text: bytes) -> int:
    """``text.count(b":")``, four times faster on large text: numpy compares 64 KB at a time
    (SIMD) into one reused buffer, where ``bytes.count`` looks at a byte at a time (370 MB:
    0.08 s against 0.38 s, measured at load 2.7)."""
    if len(text) < _STEP:
        return text.count(b":")
    import numpy as np  # large lists only

    view = np.frombuffer(text, np.uint8)
    hit = np.empty(_STEP, np.bool_)
    n = 0
    for at in range(0, len(view), _STEP):
        part = view[at : at + _STEP]
        out = hit[: len(part)]
        np.equal(part, 58, out=out)  # 58: ":"
        n += int(np.count_nonzero(out))
    return n


def read_nodes(data: bytes) -> dict[str, Any]:
    """The node list in ``data``, each item cut down to the planner's fields, as
    :func:`gpuplan.lists.prune` cuts it; :class:`Unexpected` when this reader cannot say."""
    try:
        top = _LIST.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Unexpected from None
    nodes = top.items
    if nodes is None:
        raise Unexpected
    # every colon of the file is one of a field given, or inside the raw text of its value: the
    # records written back (fields not given left out, raw text as it was) hold them all
    head = tuple(getattr(top, k) for k in _HEAD)
    written = 1 + len(list(filter(None, head))) + b"".join(head).count(b":")  # 1: the items' own
    for start in range(0, len(nodes), BATCH):
        written += colons(_ENCODE.encode(nodes[start : start + BATCH]))
    if written != colons(data):
        raise Unexpected  # a key given twice, or a field this reader does not know
    metas = [None if (m := n.metadata) is None else (m.name, m.labels) for n in nodes]
    specs = [None if (s := n.spec) is None else (s.taints, s.unschedulable) for n in nodes]
    statuses = [None if (st := n.status) is None else (st.allocatable,) for n in nodes]
    try:
        rest = {k: _DECODE.decode(r) for k, r in zip(_HEAD, head, strict=True) if r}
        columns = {
            "kind": _column([n.kind for n in nodes]),
            "metadata": _fill(metas, ("name", 0), ("labels", 1)),
            "spec": _fill(specs, ("taints", 0), ("unschedulable", 1)),
            "status": _fill(statuses, ("allocatable", 0)),
        }
    except msgspec.DecodeError:
        raise Unexpected from None
    items: list[dict[str, Any]] = [{} for _ in nodes]
    for key, column in columns.items():
        for item, value in zip(items, column or (), strict=bool(column)):
            if value is not _ABSENT:
                item[key] = value
    return rest | {"items": items}


def _fill(records: list[tuple[Any, ...] | None], *kept: tuple[str, int]) -> list[Any]:
    """Each record cut down to the ``kept`` fields (name, place in the record), _ABSENT where
    the record is not given; a field is filled in for all records at once, not record by record."""
    out: list[Any] = [_ABSENT if r is None else {} for r in records]
    for name, at in kept:
        values = _column([r and r[at] for r in records])
        if values is not None:
            for record, value in zip(out, values, strict=True):
                if value is not _ABSENT:
                    record[name] = value
    return out


def _column(raws: list[Any]) -> list[Any] | None:
    """Each given raw value decoded (all in one call), _ABSENT where none is given (None: none
    is); a key given twice inside any of them: :class:`Unexpected`."""
    given = [r for r in raws if r]
    if not given:
        return None
    text = b"[" + b",".join(given) + b"]"
    if b"\\u003a" in text or b"\\u003A" in text:
        raise Unexpected  # a colon written as an escape: the count below would not see it
    values: list[Any] = _DECODE.decode(text)
    if colons(_ENCODE.encode(values)) != colons(text):
        raise Unexpected  # a key given twice: the item reader names it
    if len(given) == len(raws):
        return values
    it = iter(values)
    return [next(it) if r else _ABSENT for r in raws]

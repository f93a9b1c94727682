"""Read a large JSON node list by the Node's schema: only what the planner reads is decoded.

Notes
-----
``kubectl get nodes -o json`` for 65,000 nodes is 370 MB, nine tenths of it annotations,
conditions, addresses, nodeInfo and images. Decoding every item whole (to find a key given
twice) costs seconds; here msgspec decodes the list into small typed records (:class:`_Node`)
in one call: the fields the planner reads (:data:`gpuplan.lists.NODE_FIELDS`) decoded as any
JSON value, every other field of a Node kept as its raw JSON text (a slice of the input,
nothing decoded). The items are then built from the records in one loop. Node names alone are
decoded apart, all in one array, so that they lie side by side in memory: the planner sorts
and compares them, and decoded in their records (among the labels and the records' remains)
they made the planning after the read 0.3-0.5 s slower at 65,000 nodes and 50 plans.
(Decoding each of the planner's fields apart, as an array, made the read itself twice as
long: 1.2 s against 0.6 s at 65,000 nodes, load 5.)

A key given twice is still refused, without decoding what the planner never reads: msgspec
keeps the last of two values of one field (in a record, in a decoded value). Every colon of
the file is the colon of a field of a record, or inside its value; the records written back
by msgspec (the fields not given left out, raw text as it was, decoded values with one key
each) hold them all, once each. When they hold fewer than the file, a key was given twice (or
a field this reader does not know was skipped): the file goes to
:func:`gpuplan.lists.read_list`'s item reader, which names the key and its lines. A colon
written as an escape (``\\u003a``) in a decoded value comes back as a colon, one more, which
could hide a key given twice: a file that may hold one goes to the item reader too (looked
for only where the file has a backslash). Colons are counted by numpy (:func:`colons`).

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
_UNSET: Any = msgspec.UNSET  # a field the planner reads, not given


# Each record lists every field the API server writes (core/v1 Node, ObjectMeta, NodeSpec,
# NodeStatus, a List). The planner's fields are named first and decoded (any JSON value, as the
# generic reader gives it); the rest is kept as raw text (or _ABSENT), only counted.
class _Meta(Struct, gc=False, omit_defaults=True):
    name: Raw = _ABSENT  # decoded apart, see read_nodes
    labels: Any = _UNSET
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
    taints: Any = _UNSET
    unschedulable: Any = _UNSET
    configSource: Raw = _ABSENT
    externalID: Raw = _ABSENT
    podCIDR: Raw = _ABSENT
    podCIDRs: Raw = _ABSENT
    providerID: Raw = _ABSENT


class _Status(Struct, gc=False, omit_defaults=True):
    allocatable: Any = _UNSET
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
    kind: Any = _UNSET
    metadata: _Meta | None = None
    spec: _Spec | None = None
    status: _Status | None = None
    apiVersion: Raw = _ABSENT


class _List(Struct, gc=False, omit_defaults=True):
    items: list[_Node] | None = None
    apiVersion: Any = _UNSET
    kind: Any = _UNSET
    metadata: Any = _UNSET


_LIST = msgspec.json.Decoder(_List)
_DECODE = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()
_HEAD = ("apiVersion", "kind", "metadata")  # the list's own fields beside its items
BATCH = 4096  # items written back at once to count their colons: a few MB
_STEP = 1 << 16  # bytes compared at once by colons(): stays in the first-level cache
_ESCAPED_COLONS = (b"\\u003a", b"\\u003A")
# a list this large has its colons counted by numpy: below, bytes.count costs less than importing
# numpy (0.1 s). Counting 31 MB (65,000 nodes, the planner's fields only) twice: 35 ms against
# 113 ms (read_nodes 0.38 s against 0.46 s, 5 runs each); 352 MB (65,000 whole nodes) twice:
# 345 ms against 240 ms; even near 170 MB (load 5.5)
NUMPY_FROM = 128 << 20


def colons(text: bytes, *, vectorized: bool = True) -> int:
    """``text.count(b":")``, four times faster on large text: numpy compares 64 KB at a time
    (SIMD) into one reused buffer, where ``bytes.count`` looks at a byte at a time (370 MB:
    0.08 s against 0.38 s, measured at load 2.7). Not ``vectorized``: by ``bytes.count``."""
    return _colons(text, escapes=False, vectorized=vectorized)[0]


def _colons(text: bytes, *, escapes: bool, vectorized: bool = True) -> tuple[int, bool]:
    """The colons of ``text``, and (``escapes``) whether it may hold a colon written as an
    escape, ``\\u003a``: looked for only in the steps that hold a backslash (most hold none)."""
    if len(text) < _STEP or not vectorized:
        may = escapes and b"\\" in text and any(e in text for e in _ESCAPED_COLONS)
        return text.count(b":"), may
    import numpy as np  # large lists only

    view = np.frombuffer(text, np.uint8)
    hit = np.empty(_STEP, np.bool_)
    n = 0
    escaped = False
    for at in range(0, len(view), _STEP):
        part = view[at : at + _STEP]
        out = hit[: len(part)]
        np.equal(part, 58, out=out)  # 58: ":"
        n += int(np.count_nonzero(out))
        if escapes and not escaped:
            np.equal(part, 92, out=out)  # 92: a backslash; the escape may run into the next step
            if out.any():
                piece = text[at : at + _STEP + 5]
                escaped = any(e in piece for e in _ESCAPED_COLONS)
    return n, escaped


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
    # every colon of the file is one of a field given, or inside its value: the records written
    # back (fields not given left out, raw text as it was, decoded values with one key each)
    # hold them all, unless a key was given twice (or a field this reader does not know skipped)
    head = {k: v for k in _HEAD if (v := getattr(top, k)) is not _UNSET}
    big = len(data) >= NUMPY_FROM
    written = 1 + colons(_ENCODE.encode(head), vectorized=big)  # 1: the items' own
    for start in range(0, len(nodes), BATCH):
        written += colons(_ENCODE.encode(nodes[start : start + BATCH]), vectorized=big)
    given, escaped = _colons(data, escapes=True, vectorized=big)
    if escaped:
        raise Unexpected  # a decoded ``\\u003a`` is written back as a colon: the count would miss one
    if written != given:
        raise Unexpected  # a key given twice, or a field this reader does not know
    # the node names apart, all in one call: they are made side by side in memory, where the
    # planner sorts and compares them (decoded in their records, among the other values, the
    # planning that followed took 0.2-0.4 s longer at 65,000 nodes)
    names = [_ABSENT if (m := n.metadata) is None else m.name for n in nodes]
    name_text = b"[" + b",".join(filter(None, names)) + b"]"
    try:
        name_values: list[Any] = _DECODE.decode(name_text)
    except msgspec.DecodeError:
        raise Unexpected from None
    if colons(_ENCODE.encode(name_values), vectorized=big) != colons(name_text, vectorized=big):
        raise Unexpected  # a key given twice inside a name (the item reader names it)
    given_names = iter(name_values)
    items: list[dict[str, Any]] = []
    add = items.append
    for n, name in zip(nodes, names, strict=True):  # the planner's fields only, as prune keeps them
        item: dict[str, Any] = {}
        if n.kind is not _UNSET:
            item["kind"] = n.kind
        if (m := n.metadata) is not None:
            meta = item["metadata"] = {}
            if name:
                meta["name"] = next(given_names)
            if m.labels is not _UNSET:
                meta["labels"] = m.labels
        if (s := n.spec) is not None:
            spec = item["spec"] = {}
            if s.taints is not _UNSET:
                spec["taints"] = s.taints
            if s.unschedulable is not _UNSET:
                spec["unschedulable"] = s.unschedulable
        if (st := n.status) is not None:
            item["status"] = {} if st.allocatable is _UNSET else {"allocatable": st.allocatable}
        add(item)
    return head | {"items": items}

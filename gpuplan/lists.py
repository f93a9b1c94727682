"""Read large node and pod lists fast: only the fields the planner reads are kept.

Notes
-----
A 65,000-node cluster written by ``kubectl get nodes -o json`` is a few hundred megabytes, most
of it what the planner never reads (annotations, conditions, addresses, nodeInfo, images). Read
whole, it costs seconds and a gigabyte from JSON, minutes and gigabytes from YAML (PyYAML builds
a Python object with two position marks for every scalar). Here a list of at least
:data:`LARGE` bytes is read one item at a time, and each item is cut down to :data:`NODE_FIELDS`
or :data:`POD_FIELDS` (what :mod:`planner.read.parse` reads) before the next is read, so memory holds
the text and the small items only. The result is the same document the generic reader
(:mod:`gpuplan.documents`) gives, minus fields nobody reads: the planner parses it and names
fields and indices exactly as before.

- JSON: a node list is read by the Node's schema (:mod:`gpuplan.nodes_json`): msgspec decodes
  only the planner's fields. Anything else (a pod list, a Node with a field that schema does not
  know) is cut into items by msgspec (C), each decoded whole.
- YAML: rapidyaml (C++) parses the items a hundred or so at a time (the items of a ``kind: List``
  are the lines from one ``- `` at the left margin to the next) and writes them out as JSON, read
  as a JSON node list is (other lists: each item decoded whole); a Node's status is first cut
  down to its allocatable in rapidyaml's tree (:func:`_cut_status`), three quarters of the text
  then neither written nor decoded. YAML 1.1 (PyYAML's reading,
  kept for compatibility) and JSON read a few plain scalars differently (``yes``, ``~``,
  ``0x10``, dates, ``1e3``): an item whose kept fields hold a string that PyYAML would read as
  something else unquoted, or any float, is read again by PyYAML, so every value is PyYAML's.
  The text is read in few passes: the lines at the left margin once (item starts, the list's
  end, a document marker), each chunk's bytes once (one translate to their roles, then numpy:
  a reserved start, an anchor, tag or tab). Two processes share the chunks: a forked worker
  parses them and writes their JSON from the first on, this process decodes what it sends and
  reads whole chunks from the last one back until the two meet (:func:`_read_chunks`). Only
  bytes cross between them; all that decides stays in this process.
- A mapping key given twice is found without a second parser: values written back by msgspec
  (one key each) have fewer colons than their text exactly when a key was dropped (escaped
  colons, ``\\u003a``, send the file to the generic reader). The item is then read by the generic
  reader, whose error names both lines. A node list read by the schema is checked so in the
  fields the planner reads and in the records that hold them (the list, a Node, its metadata,
  spec and status), not inside the fields it never reads (an annotation, an image): a key given
  twice there changes no plan, and finding it would mean decoding them all, which is what made
  this reader slow. A pod list is checked everywhere. (One corner is compared as written, not
  as YAML 1.1 reads it: two plain keys that are the same number or boolean spelled two ways,
  ``1`` and ``0x1``.)
- Anything this reader does not expect goes to the generic reader: slower, never different.
  Anchors, tags, tabs, several documents, a list not at the left margin, a file that is not
  valid JSON; and YAML the two parsers read differently (a plain scalar starting with ``@``,
  ``,``, ``]`` and the like, flow collections), found by a fuzz that types any text into a node.
"""

from __future__ import annotations

import os
import re
import signal
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from enum import Enum
from functools import cache, partial
from itertools import chain
from typing import Any

import msgspec
import yaml

from gpuplan.documents import DuplicateKey, UniqueKeyLoader
from gpuplan.fields import LARGE, NODE_FIELDS, Fields, prune, read_generic
from planner import InvalidInput

# YAML items parsed together: a call amortised, and rapidyaml's tree stays in cache (the 65,000
# nodes of kubectl's YAML, read in fresh processes, four pairs at load 4.6-5.6: 2.12-2.16 s CPU
# at 125, 2.19-2.21 s at 500, once each node's status is cut down in the tree; 1000: 2.8 s)
CHUNK = 125

_DECODE = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()
_RAW_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_RAW_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ESCAPED_COLON = (b"\\u003a", b"\\u003A")


class _Generic(Exception):
    """This text is for the generic reader."""


def _from_json(data: bytes, fields: Fields) -> dict[str, Any]:
    """The top-level mapping with its items cut down. A key given twice anywhere: the values
    written back (one key each) hold fewer colons, all told, than the text."""
    try:
        top = _RAW_TOP.decode(data)
        raw_items = _RAW_ITEMS.decode(top.pop("items"))
        rest = {k: _DECODE.decode(v) for k, v in top.items()}
        # the top's own pairs: one colon each, and any in their keys
        colons = len(top) + 1 + sum(k.count(":") for k in top)
        colons += sum(_ENCODE.encode(v).count(b":") for v in rest.values())
        items = []
        for raw in raw_items:
            whole = _DECODE.decode(raw)
            colons += _ENCODE.encode(whole).count(b":")
            items.append(prune(whole, fields))
    except (msgspec.DecodeError, KeyError):
        raise _Generic from None
    if colons != data.count(b":"):
        raise _Generic  # the generic reader names the key and its two lines
    return rest | {"items": items}


# --- YAML ---------------------------------------------------------------------------------

_ITEMS = re.compile(rb"^items:[ \t]*\r?\n", re.M)
# a line at the left margin that is not a comment: in the items an item's `- `, then what follows
# (a line's first byte other than `#` and the white space of a regular expression's `\s`)
_AT_MARGIN = bytes(0 if b in b"# \t\n\r\f\v" else 1 for b in range(256))
_MARGIN_STEP = 1 << 16  # bytes looked at once by _margin_lines: stays in the second-level cache
_AFTER_DASH = (b" ", b"\t", b"\r", b"\n")  # a `-` at the margin before one of these starts an item
# documents, anchors, aliases, tags, merges; and tabs, which the two parsers treat differently
_NOT_PLAIN = (b"\n---", b"\n...", b"\n%", b"&", b"*", b"!", b"<<", b"\t")
_RARE = _NOT_PLAIN[3:]  # in the items: looked for chunk by chunk, once their first bytes are seen
# (the first three are looked for outside the items; inside, among the lines at the margin)
_STR = "tag:yaml.org,2002:str"


@cache
def _plain_is_str(text: str) -> bool:
    """Whether PyYAML reads ``text``, unquoted, as this same string."""
    return bool(UniqueKeyLoader.resolve(UniqueKeyLoader, yaml.ScalarNode, text, (True, False)) == _STR)


@cache
def _json_literal(text: str) -> bool:
    """Whether ``text`` is a JSON number, true, false or null (written unquoted if it was plain)."""
    try:
        return not isinstance(_DECODE.decode(text), str)
    except msgspec.DecodeError:
        return False


def _yaml_reads_the_same(item: Any) -> bool:
    """Whether PyYAML reads the kept fields of an item as the JSON written from its YAML does.

    A string was quoted in the YAML, or plain and not a JSON literal: PyYAML agrees unless it
    reads the plain text as something else (``yes``, ``~``, a date). A key is always quoted in
    JSON, so there the plain reading alone decides. A float may have been ``1e3`` (a string to
    PyYAML); true, false, null and integers read the same in both."""
    kind = type(item)
    if kind is dict:
        if not _OK_KEYS.issuperset(item) and not all(map(_key_ok, item)):
            return False
        values: Iterable[Any] = item.values()
    elif kind is list:
        values = item
    else:
        return _yaml_reads_the_same_scalar(item)
    for value in values:  # a loop, not a recursion per scalar: most values are strings seen before
        kind = type(value)
        if kind is str:
            if value not in _OK_VALUES and not _value_ok(value):
                return False
        elif kind is dict or kind is list:
            if not _yaml_reads_the_same(value):
                return False
        elif kind is float:
            return False
    return True


def _all_read_the_same(items: list[Any]) -> bool:
    """Whether :func:`_yaml_reads_the_same` holds for every one of ``items``, found a level at a
    time: all the level's keys as one set, all its strings as one set, what its mappings and lists
    hold as the next level (loops in C over a chunk's items, not a Python call per mapping: most
    strings and keys are the same in every node)."""
    level: list[Any] = items
    while level:
        kinds = set(map(type, level))
        if float in kinds:
            return False
        mixed = len(kinds) > 1
        below: list[Any] = []
        if dict in kinds:
            dicts = [v for v in level if type(v) is dict] if mixed else level
            keys: set[str] = set().union(*dicts)
            if not _OK_KEYS.issuperset(keys) and not all(map(_key_ok, keys - _OK_KEYS)):
                return False
            below.extend(chain.from_iterable(map(dict.values, dicts)))
        if list in kinds:
            below.extend(
                chain.from_iterable(v for v in level if type(v) is list)
                if mixed
                else chain.from_iterable(level)
            )
        if str in kinds:
            strings = {v for v in level if type(v) is str} if mixed else set(level)
            if not _OK_VALUES.issuperset(strings) and not all(map(_value_ok, strings - _OK_VALUES)):
                return False
        level = below
    return True


def _yaml_reads_the_same_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return value in _OK_VALUES or _value_ok(value)
    return not isinstance(value, float)


# strings known to read the same (only strings: 1.0 == True would let a float through)
_OK_KEYS: set[str] = set()
_OK_VALUES: set[str] = set()


def _key_ok(key: str) -> bool:
    if _plain_is_str(key):
        _OK_KEYS.add(key)
        return True
    return False


# first characters for which PyYAML tries an implicit type (bool, int, float, null, timestamp,
# merge, value); a JSON literal starts with one of them too. Any other start is a string to both.
_RESOLVED_FIRST = frozenset(UniqueKeyLoader.yaml_implicit_resolvers)
_STRING_START = None not in _RESOLVED_FIRST and set("-0123456789tfn") <= _RESOLVED_FIRST


def _value_ok(value: str) -> bool:
    if _STRING_START and value and value[0] not in _RESOLVED_FIRST:  # a host name, once each
        _OK_VALUES.add(value)
        return True
    if _plain_is_str(value) or _json_literal(value):
        _OK_VALUES.add(value)
        return True
    return False


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """rapidyaml writes its parse errors to the process's stderr (file descriptor 2) before it
    raises; the command's one line of error is the generic reader's, so those go nowhere."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# A plain scalar starting (after a space, a line's start or a bracket) with a character YAML
# forbids or reads otherwise there (@, a backquote, ], }, a comma, %, :, ?), or a flow collection
# other than [] and {}: there the two parsers part ways (PyYAML refuses `zone: @x`, rapidyaml
# reads it) and kubectl writes neither. Found in C: each byte mapped to its role (1: may come
# before a scalar, 2: may not start one, 3: both); a reserved start is one of these pairs of roles.
_ROLES = bytes(
    3 if chr(b) in ",[{" else 1 if chr(b) in " \n\r" else 2 if chr(b) in "@`]}%:?" else 0 for b in range(256)
)
_RESERVED_PAIRS = (b"\x01\x02", b"\x01\x03", b"\x03\x02", b"\x03\x03")


# the roles with one more: a byte that may start an anchor, alias, tag or merge, a tab, or the
# first byte (in UTF-8) of a line break only PyYAML knows (bit 7, out of reach of the shift below)
_SCAN = bytes(r | (128 if chr(b) in "&*!<\t" or b in (0xC2, 0xE2) else 0) for b, r in enumerate(_ROLES))
# YAML 1.1's other line breaks, NEL, LS and PS: PyYAML folds one inside a quoted scalar (to a
# space, as a newline), rapidyaml keeps it as a character. A chunk with one is read by PyYAML
# (found by the fuzz of pod lists: a nodeName of '\x85' read as '\x85      ' against ' ')
_BREAKS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")


class _Route(Enum):
    """How a chunk of items must be read."""

    RAPIDYAML = "rapidyaml"  # plain: rapidyaml reads it as PyYAML does
    PYYAML = "pyyaml"  # a reserved start or one of YAML 1.1's other line breaks: the chunk by PyYAML
    GENERIC = "generic"  # an anchor, alias, tag, merge or tab: the whole file by the generic reader


def _route(chunk: bytes) -> _Route:
    """How ``chunk`` must be read, from its one byte pass (:func:`_scan`): the rule both stages
    of :class:`_YamlChunks` follow."""
    rare, reserved = _scan(chunk)
    if rare and any(map(_holds(chunk), _RARE)):
        return _Route.GENERIC
    if reserved or (rare and any(map(_holds(chunk), _BREAKS))):
        return _Route.PYYAML
    return _Route.RAPIDYAML


def _reserved_start(text: bytes) -> bool:
    """Whether such a start occurs in ``text``: the ``@`` of ``repo@sha256:...`` does not count;
    a quoted string that happens to hold ``a @b`` sends the file to the generic reader, slower
    but the same."""
    return _scan(text)[1]


def _scan(text: bytes) -> tuple[bool, bool]:
    """Whether ``text`` may hold what is not plain (:data:`_RARE`'s first bytes, or the first
    byte of one of :data:`_BREAKS`), and whether it holds a reserved start.

    One pass: every byte's role (one translate), then each role beside the next one's, shifted
    so that "may come before" meets "may not start" in the lowest bit (numpy, a few MB at a
    time). Searching the text for each pair of such bytes instead read it once per pair: a
    second a chunk of 200 MB of kubectl's YAML; each rare byte looked for alone, 60 ms."""
    import numpy as np  # large YAML lists only: a plan on a small cluster never loads it

    if b"[" in text or b"{" in text:
        text = text.replace(b"[]", b"..").replace(b"{}", b"..")
    roles = np.frombuffer(text.translate(_SCAN), np.uint8)
    if not len(roles):
        return False, False
    return bool(roles.max() >= 128), bool(np.any(roles[:-1] & (roles[1:] >> 1)))


def _holds(data: bytes) -> Callable[[bytes], bool]:
    """``needle in data``, its last byte looked for first (memchr): ``%`` and ``<`` are rare in a
    node list, a search for ``\\n%`` or ``<<`` stops at every newline or ``<``."""

    def holds(needle: bytes) -> bool:
        return needle[-1:] in data and needle in data

    return holds


def _margin_lines(data: bytes, start: int) -> Iterator[int]:
    """Where each line at the left margin that is not a comment begins, after ``start`` (a line
    starting at ``start`` itself not counted), in order: a line whose first byte is not ``#`` or
    white space.

    numpy, 64 KB at a time: the newlines whose next byte is not a space (two comparisons), then
    among those few the next byte looked up. A regular expression (``\\n[^#\\s]``) looked at
    every byte in turn: 0.21-0.23 s for the 65,000 nodes of kubectl's YAML, against 0.08 s
    (best of seven, load 6)."""
    import numpy as np  # large YAML lists only

    view = np.frombuffer(data, np.uint8)
    at_margin = np.frombuffer(_AT_MARGIN, np.bool_)
    newline = np.empty(_MARGIN_STEP, np.bool_)
    unspaced = np.empty(_MARGIN_STEP, np.bool_)
    for at in range(start, len(view) - 1, _MARGIN_STEP):
        part = view[at : at + _MARGIN_STEP + 1]  # the newlines of [at, at + step), and the byte after
        n = len(part) - 1
        np.equal(part[:-1], 10, out=newline[:n])
        np.not_equal(part[1:], 32, out=unspaced[:n])
        np.logical_and(newline[:n], unspaced[:n], out=newline[:n])
        found = np.flatnonzero(newline[:n])
        found = found[at_margin[part[found + 1]]]
        yield from (found + (at + 1)).tolist()


def _items_region(data: bytes) -> tuple[int, int, list[int]]:
    """Where the ``items:`` of a top-level block sequence at the left margin begins, where its
    items end, and where each item starts (the first where the items start).

    Inside the items every line at the left margin starts with ``-``, ``#`` or white space (the
    first that does not ends them), so a document's ``---`` there is one of the lines at the
    margin, seen once each, and ``...`` or ``%`` cannot be there: only the text before and after
    the items is searched for those (a search of 200 MB for ``\\n---`` stops at every ``-``).
    Anchors, aliases, tags, merges and tabs are looked for here before and after the items, and
    in the items chunk by chunk (:func:`_scan`, in the pass that looks for a reserved start)."""
    found = _ITEMS.search(data)
    if found is None or data.startswith((b"---", b"...", b"%")):
        raise _Generic
    start = found.end()
    if not data.startswith(b"-", start) or data.startswith(b"---", start):
        raise _Generic
    starts = [start]
    end = len(data)
    for at in _margin_lines(data, start):
        if data[at] != 0x2D:  # not `-`: the first key after the list
            end = at
            break
        if data.startswith(b"---", at):
            raise _Generic  # a second document
        if data[at + 1 : at + 2] in _AFTER_DASH:
            starts.append(at)
    if any(map(_holds(data[:start]), _NOT_PLAIN)) or any(map(_holds(data[end - 1 :]), _NOT_PLAIN)):
        raise _Generic  # anchors, aliases, tags, merges or documents: the generic reader
    return found.start(), end, starts


def _chunks(starts: list[int], end: int) -> Iterator[tuple[int, int, list[int]]]:
    for i in range(0, len(starts), CHUNK):
        group = starts[i : i + CHUNK]
        stop = starts[i + CHUNK] if i + CHUNK < len(starts) else end
        yield group[0], stop, group


def _pyyaml(text: bytes, lines: Callable[[], int], source: str, what: str) -> Any:
    """The one document of ``text`` as PyYAML reads it; a key given twice is refused naming its
    lines in the file (``text`` starts ``lines`` lines down); anything else odd is for the
    generic reader."""
    try:
        docs = list(yaml.load_all(text.decode("utf-8"), Loader=UniqueKeyLoader))
    except DuplicateKey as e:
        raise InvalidInput(what, f"{source}: {e.shifted(lines())}") from None
    except (yaml.YAMLError, UnicodeDecodeError):
        raise _Generic from None
    if len(docs) != 1:
        raise _Generic
    return docs[0]


def _one_yaml_item(data: bytes, start: int, stop: int, source: str, what: str) -> Any:
    """One item (``- ...`` at the left margin) read by PyYAML."""
    doc = _pyyaml(data[start:stop], lambda: data.count(b"\n", 0, start), source, what)
    if not isinstance(doc, list) or len(doc) != 1:
        raise _Generic
    return doc[0]


def _cut_status(tree: Any, root: int) -> bool:
    """Each item's ``status`` cut down to its ``allocatable`` (all the planner reads of it) in
    the tree, before the tree is written out as JSON: conditions, images, nodeInfo, addresses
    and capacity are most of kubectl's YAML of a Node (200 MB of 65,000 nodes: a quarter is
    left), and are then neither written nor decoded. False (stopped part way) when
    ``allocatable`` is given twice: the chunk is then read whole, for the key to be refused
    naming its lines.

    A few calls a node: ``allocatable`` moved out beside the status, the status emptied, moved
    back (taking out each other key by name cost as much as writing them all). The calls go to
    the C functions under ``ryml.Tree``'s methods, given the tree's C object (``tree.this``):
    through the methods, each call also went through a Python method and looked up the C object
    anew, and the cut took three times as long (520 chunks of 125 nodes, measured at load 4.7:
    0.15 s against 0.38 s). A key given twice among the status's other fields is not looked for:
    the planner never reads them (as inside an annotation). A status that is not a mapping is
    left whole, for the planner to refuse; a chunk with a backslash is not cut (an escape in a
    key: rapidyaml and PyYAML may not read it alike, and the key could be ``allocatable``)."""
    from ryml import NONE as none
    from ryml import _ryml

    t = tree.this  # the C object: SWIG's calls take it as they take the tree, without a look-up
    find, move, is_map = _ryml.Tree_find_child, _ryml.Tree_move, _ryml.Tree_is_map
    empty, after = _ryml.Tree_remove_children, _ryml.Tree_next_sibling
    item = _ryml.Tree_first_child(t, root)
    while item != none:
        status = find(t, item, b"status")
        if status != none and is_map(t, status):
            kept = find(t, status, b"allocatable")
            if kept == none:
                empty(t, status)
            else:
                move(t, kept, item, status)
                if find(t, status, b"allocatable") != none:
                    return False
                empty(t, status)
                move(t, kept, status, none)
        item = after(t, item)
    return True


class _YamlChunks:
    """Reads the items of a YAML list a chunk at a time (one rapidyaml tree and one output
    buffer kept across chunks), in two stages: :meth:`json_text` (the chunk parsed, its statuses
    cut, written out as JSON: only rapidyaml and numpy, may run in a worker, see :func:`_read_chunks`)
    and :meth:`items` (the JSON decoded and checked, or the chunk read another way)."""

    def __init__(self, data: bytes, source: str, what: str, fields: Fields) -> None:
        import ryml  # rapidyaml: only for large YAML lists

        self.data, self.source, self.what, self.fields = data, source, what, fields
        self.tree = ryml.Tree()
        self.out = bytearray()

    def _parse(self, chunk: bytes) -> Any:
        import ryml

        tree = self.tree
        tree.clear()
        tree.clear_arena()
        with _quiet_stderr():
            ryml.parse_in_arena(chunk, tree=tree)
        return tree

    def _emit(self, chunk: bytes) -> bytes:
        import ryml

        if len(self.out) < 3 * len(chunk):
            self.out = bytearray(3 * len(chunk))
        try:  # written into one buffer kept across chunks: no second pass to size it
            return bytes(ryml.emit_json_in_place(self.tree, self.out))
        except IndexError:  # JSON larger than thrice the YAML: let it size the buffer
            whole: str = ryml.emit_json(self.tree)
            return whole.encode("utf-8")

    def json_text(self, chunk_at: tuple[int, int, list[int]]) -> bytes | None:
        """The chunk's items as JSON, each Node's status cut down to its allocatable; None when
        the chunk is not plain (an anchor, a reserved start...), not what rapidyaml reads as
        these items, or a status gives ``allocatable`` twice: :meth:`items` then reads it as
        it must."""
        import ryml

        first, stop, group = chunk_at
        chunk = self.data[first:stop]
        if _route(chunk) is not _Route.RAPIDYAML:
            return None
        try:
            tree = self._parse(chunk)
            root = tree.root_id()
            if not tree.is_seq(root) or tree.num_children(root) != len(group):
                return None
            if self.fields is NODE_FIELDS and b"\\" not in chunk and not _cut_status(tree, root):
                return None
            return self._emit(chunk)
        except (ryml.ExceptionParse, ryml.ExceptionBasic, UnicodeError):
            return None

    def items(self, chunk_at: tuple[int, int, list[int]], text: bytes | None) -> list[Any]:
        """The chunk's items cut down to the fields, from ``text`` (:meth:`json_text`'s) when
        given; without it, the chunk read as it must be: by the generic reader (an anchor, a tab,
        what rapidyaml cannot read), by PyYAML (a reserved start), or whole (``allocatable``
        given twice, to be refused)."""
        if text is not None:
            return self._decoded(text, chunk_at)
        otherwise = self._text_otherwise(chunk_at)
        return self._decoded(otherwise, chunk_at) if isinstance(otherwise, bytes) else otherwise

    def _text_otherwise(self, chunk_at: tuple[int, int, list[int]]) -> bytes | list[Any]:
        import ryml

        data, source, what, fields = self.data, self.source, self.what, self.fields
        first, stop, group = chunk_at
        chunk = data[first:stop]
        route = _route(chunk)
        if route is _Route.GENERIC:
            raise _Generic  # anchors, aliases, tags, merges or tabs: the generic reader
        if route is _Route.PYYAML:  # these few thousand items by PyYAML, as the generic reader would
            doc = _pyyaml(chunk, partial(data.count, b"\n", 0, first), source, what)
            if not isinstance(doc, list) or len(doc) != len(group):
                raise _Generic
            return [prune(item, fields) for item in doc]
        try:
            tree = self._parse(chunk)
            root = tree.root_id()
            if not tree.is_seq(root) or tree.num_children(root) != len(group):
                raise _Generic
            # what json_text cut, if it was a chunk of nodes: allocatable given twice, kept
            # whole for it to be refused
            return self._emit(chunk)
        except (ryml.ExceptionParse, ryml.ExceptionBasic, UnicodeError):
            raise _Generic from None

    def _decoded(self, text: bytes, chunk_at: tuple[int, int, list[int]]) -> list[Any]:
        from gpuplan.nodes_json import Unexpected, read_nodes

        data, source, what, fields = self.data, self.source, self.what, self.fields
        _, stop, group = chunk_at
        ends = [*group[1:], stop]
        items: list[Any] = []
        if fields is NODE_FIELDS:
            nodes: list[Any] | None
            try:  # as a JSON node list is read: the planner's fields only
                nodes = read_nodes(b'{"items":' + text + b"}")["items"]
            except Unexpected:
                nodes = None  # item by item, then
            if nodes is not None and len(nodes) == len(group):
                if _all_read_the_same(nodes):  # else find which, item by item
                    return nodes
                for item, item_start, item_end in zip(nodes, group, ends, strict=True):
                    if not _yaml_reads_the_same(item):  # a value PyYAML reads otherwise
                        item = prune(_one_yaml_item(data, item_start, item_end, source, what), fields)
                    items.append(item)
                return items
        try:
            raws = _RAW_ITEMS.decode(text)
            wholes = [_DECODE.decode(raw) for raw in raws]
        except msgspec.DecodeError:
            raise _Generic from None
        if len(raws) != len(group):
            raise _Generic
        twice = sum(_ENCODE.encode(w).count(b":") for w in wholes) != text.count(b":")
        for raw, whole, item_start, item_end in zip(raws, wholes, group, ends, strict=True):
            item = prune(whole, fields)
            if (twice and _ENCODE.encode(whole).count(b":") != bytes(raw).count(b":")) or not (
                _yaml_reads_the_same(item)
            ):  # a key given twice (PyYAML names its lines), or a value PyYAML reads otherwise
                item = prune(_one_yaml_item(data, item_start, item_end, source, what), fields)
            items.append(item)
        return items


def _from_yaml(data: bytes, source: str, what: str, fields: Fields) -> dict[str, Any]:
    begin, end, starts = _items_region(data)
    try:
        head = yaml.load(data[:begin] + b"items: []\n" + data[end:], Loader=UniqueKeyLoader)
    except (yaml.YAMLError, DuplicateKey):
        raise _Generic from None  # the generic reader says where
    if not isinstance(head, dict):
        raise _Generic
    chunks = list(_chunks(starts, end))
    reader = _YamlChunks(data, source, what, fields)
    try:
        answers = _read_chunks(reader, chunks)
    except InvalidInput:  # a key given twice; but an alias, tag... later is the generic reader's
        if any(map(_holds(data), _RARE)):  # (it reports an undefined alias first, wherever it is)
            raise _Generic from None
        raise
    return head | {"items": [item for items in answers for item in items]}


# Whether a forked worker reads chunks beside this process (see _read_chunks)
WORKER = hasattr(os, "fork")


def _read_chunks(reader: _YamlChunks, chunks: list[tuple[int, int, list[int]]]) -> list[list[Any]]:
    """Each chunk's items, in order; what the first chunk that fails raises.

    Two processes share the chunks when :data:`WORKER`: a forked worker writes the JSON of the
    chunks from the first on (:meth:`_YamlChunks.json_text`: rapidyaml's parse, the cut and the
    writing, two thirds of the cost), and this process decodes each as it comes, and between
    them reads whole chunks from the last one back, until the two meet. The worker only parses
    and writes: everything that decides (the decoding, the checks, what is refused, the slow
    paths) happens here, and what a chunk raises is raised in the chunks' order, as when one
    process reads them all in turn; a worker that stops early or cannot start changes nothing but
    the time. The 65,000 nodes of kubectl's YAML and 50 plans, ``gpuplan plan`` in fresh
    processes, four pairs at load 1-2: 2.65-2.73 s against 3.39-3.47 s read by one process, the
    same CPU time (3.2 s user) and peak memory (384 MB). (The worker writing every chunk while
    this process only decoded them: 3.44-3.49 s, this process waiting for the worker.)"""
    if not WORKER or len(chunks) < 2:
        return [reader.items(c, reader.json_text(c)) for c in chunks]
    done: list[list[Any] | Exception | None] = [None] * len(chunks)
    with _Worker(reader, chunks) as worker:
        first, last = 0, len(chunks) - 1  # the next chunk the worker's text is for; ours
        while first <= last:
            text = worker.text()
            if text is _NOT_YET:
                done[last] = _attempt(reader, chunks[last], _MISSING)
                last -= 1
                continue
            done[first] = _attempt(reader, chunks[first], text)
            if isinstance(done[first], Exception):
                break  # the chunks after it do not matter
            first += 1
    answers = []
    for answer in done:
        if isinstance(answer, Exception):
            raise answer
        assert answer is not None
        answers.append(answer)
    return answers


_NOT_YET: Any = object()  # the worker has not sent the next text yet
_MISSING: Any = object()  # the worker will not send it: it stopped


def _attempt(reader: _YamlChunks, chunk_at: tuple[int, int, list[int]], text: Any) -> list[Any] | Exception:
    try:
        return reader.items(chunk_at, reader.json_text(chunk_at) if text is _MISSING else text)
    except (_Generic, InvalidInput) as e:
        return e


class _Worker:
    """A forked process writing each chunk's :meth:`_YamlChunks.json_text` into a pipe, in
    order: its length (-1: None), then the text. Stopped and reaped when the block ends, however
    it ends."""

    _LENGTH = struct.Struct("<q")

    def __init__(self, reader: _YamlChunks, chunks: list[tuple[int, int, list[int]]]) -> None:
        self.reader, self.chunks = reader, chunks
        self.pid = 0
        self.fd = -1
        self.buffer = bytearray()
        self.ended = False

    def __enter__(self) -> _Worker:
        try:
            read_end, write_end = os.pipe()
        except OSError:
            self.ended = True
            return self
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            self.ended = True
            return self
        if pid == 0:
            os.close(read_end)
            self._serve(write_end)  # never returns
        os.close(write_end)
        os.set_blocking(read_end, False)
        import fcntl  # where os.fork is, fcntl is (not on Windows)

        resize = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
        if resize is not None:
            with suppress(OSError):  # a larger pipe: a chunk's text (~100 KB) in one write
                fcntl.fcntl(read_end, resize, 1 << 20)
        self.pid, self.fd = pid, read_end
        return self

    def _serve(self, fd: int) -> None:
        code = 1
        try:
            with os.fdopen(fd, "wb") as out:
                for c in self.chunks:
                    text = self.reader.json_text(c)
                    out.write(self._LENGTH.pack(-1 if text is None else len(text)))
                    if text is not None:
                        out.write(text)
                        out.flush()
            code = 0
        finally:
            os._exit(code)

    def text(self) -> Any:
        """The next chunk's text (bytes or None) if the worker has sent it, :data:`_NOT_YET`
        if not, :data:`_MISSING` if it stopped before it. Never waits."""
        size_of = self._LENGTH.size
        while True:
            if len(self.buffer) >= size_of:
                (size,) = self._LENGTH.unpack_from(self.buffer)
                whole = size_of + max(size, 0)
                if len(self.buffer) >= whole:
                    text = bytes(self.buffer[size_of:whole]) if size >= 0 else None
                    del self.buffer[:whole]
                    return text
            if self.ended:
                return _MISSING
            try:
                got = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return _NOT_YET
            self.ended = not got
            self.buffer += got

    def __exit__(self, *_: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        if self.pid:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def read_list(data: bytes, source: str, what: str, fields: Fields) -> Any:
    """The list in ``data`` with each item cut down to ``fields``; read by the generic reader
    when the file is small or not what this reader expects (then cut down all the same)."""
    if len(data) >= LARGE:
        try:
            if data.lstrip()[:1] == b"{":
                if fields is NODE_FIELDS:
                    from gpuplan.nodes_json import Unexpected, read_nodes  # large lists only

                    try:
                        return read_nodes(data)
                    except Unexpected:
                        pass  # item by item, then
                if any(e in data for e in _ESCAPED_COLON):
                    raise _Generic
                return _from_json(data, fields)
            return _from_yaml(data, source, what, fields)
        except _Generic:
            pass
    return read_generic(data, source, what, fields)

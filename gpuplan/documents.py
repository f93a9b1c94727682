"""Read the documents the command line is given: files or standard input, YAML or JSON.

Notes
-----
``kubectl get nodes -o json`` and ``-o yaml`` both work, piped (``--nodes -``) or saved. JSON is
parsed as JSON (fast, and exact about what it is); everything else with libyaml when it is there.
Several YAML documents in one file are read as a ``List``, as kubectl does. A file that cannot be
read or parsed is :class:`~planner.base.errors.InvalidInput` naming the option, so the command exits
2 with one line.

A mapping key given twice is refused, as ``kubectl`` and the API server refuse it, rather than
planned with whichever value came last: ``nodes.yaml: line 12: mapping key "p4-000" already
defined at line 3``. YAML keeps libyaml's C parser and checks each mapping as it is built (the
keys compared as values, so ``1`` and ``"1"`` are two keys, as YAML says). JSON keeps the C
scanner with a pairs hook; the lines of the two keys are looked for only when there is a
duplicate to report.

Large node and pod lists go through :mod:`gpuplan.lists` instead, which decodes only the fields
the planner reads.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import yaml

from planner import InvalidInput

_BASE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster
_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKey(ValueError):
    """A mapping key given twice: the key, and the lines (1-based) of its first and second use."""

    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(f"line {second}: mapping key {quote(key)} already defined at line {first}")
        self.key, self.first, self.second = key, first, second

    def shifted(self, lines: int) -> DuplicateKey:
        """The same duplicate in a text that starts ``lines`` lines further down."""
        return DuplicateKey(self.key, self.first + lines, self.second + lines)


def quote(key: Any) -> str:
    """A key as one line: JSON-quoted, so a key holding a newline or a quote stays readable."""
    return json.dumps(key if isinstance(key, str) else str(key), ensure_ascii=False)


class UniqueKeyLoader(_BASE):  # type: ignore[valid-type,misc]
    """libyaml's safe loader that refuses a mapping key given twice (merged ``<<`` keys aside:
    overriding them is what a merge is for)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: the constructor says what is wrong with it
                    continue
                if first is not key_node:
                    raise DuplicateKey(key, first.start_mark.line + 1, key_node.start_mark.line + 1)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _JsonDuplicate
    return out


class _JsonDuplicate(Exception):
    """Raised inside the JSON scanner; :func:`json_duplicate` then finds the lines."""


# a JSON string (escapes included) or a structural character; numbers and words are skipped
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]', re.DOTALL)


def json_duplicate(text: str) -> DuplicateKey | None:
    """The first key given twice in one JSON object of ``text``, with both lines; None if none.

    A small scan over strings and brackets, run only once the C scanner has seen a duplicate."""
    stack: list[dict[str, int] | None] = []  # per open bracket: an object's keys and their lines
    line, at = 1, 0
    last: tuple[str, int] | None = None
    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        if token[0] == '"':
            last = (token, m.start())
        elif token == ":" and last is not None and stack and stack[-1] is not None:
            line += text.count("\n", at, last[1])
            at = last[1]
            key, keys = json.loads(last[0]), stack[-1]
            if key in keys:
                return DuplicateKey(key, keys[key], line)
            keys[key] = line
        elif token == "{":
            stack.append({})
        elif token == "[":
            stack.append(None)
        elif token in "]}" and stack:
            stack.pop()
    return None


def _json_duplicate_or_same_line(text: str) -> DuplicateKey:
    found = json_duplicate(text)
    return found if found is not None else DuplicateKey("?", 1, 1)  # pragma: no cover - the hook saw one


def parse(text: str, source: str, what: str) -> list[Any]:
    """JSON when it looks like JSON, else YAML (one or more documents); empty ones are dropped."""
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                return [json.loads(text, object_pairs_hook=_unique_pairs)]
            except _JsonDuplicate:
                raise _json_duplicate_or_same_line(text) from None
            except ValueError:
                pass  # YAML flow style also starts with a brace: let the YAML parser say what is wrong
        try:
            return [d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d is not None]
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise InvalidInput(what, f"{source}: not valid YAML or JSON{where}") from None
    except DuplicateKey as e:
        raise InvalidInput(what, f"{source}: {e}") from None


def read_bytes(path: str, what: str) -> bytes:
    """The bytes of ``path`` (``-``: standard input), or :class:`InvalidInput` naming the option."""
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)  # None: a text stream put in its place
            return stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InvalidInput(what, f"{path}: no such file") from None
    except OSError as e:
        raise InvalidInput(what, f"{path}: {e.strerror}") from None


def read_text(path: str, what: str) -> str:
    """The text of ``path`` (``-``: standard input), or :class:`InvalidInput` naming the option."""
    source = "standard input" if path == "-" else path
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise InvalidInput(what, f"{path}: no such file") from None
    except OSError as e:
        raise InvalidInput(what, f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidInput(what, f"{source}: not UTF-8 text") from None


def one(docs: list[Any], source: str, what: str) -> Any:
    """The document of a file: several YAML documents become a List (kubectl-style)."""
    if not docs:
        raise InvalidInput(what, f"{source}: the file is empty")
    if len(docs) > 1:
        return {"kind": "List", "items": docs}
    return docs[0]


def load(path: str, what: str) -> Any:
    """One document from ``path`` (``-``: standard input); several YAML documents become a List."""
    source = "standard input" if path == "-" else path
    return one(parse(read_text(path, what), source, what), source, what)

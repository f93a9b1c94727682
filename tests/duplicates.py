"""Documents that give a key twice: a mapping written as its pairs, in block YAML, flow YAML or
JSON. ``yaml.safe_dump`` and ``json.dumps`` cannot write a duplicate (a dict holds a key once),
so the duplicate-key properties of the unit and fault suites write their documents with these."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml


def mappings(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every non-empty mapping in a document."""
    out = []
    if isinstance(doc, dict):
        if doc:
            out.append(path)
        for k, v in doc.items():
            out += mappings(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += mappings(v, (*path, i))
    return out


class Pairs(list[tuple[Any, Any]]):
    """A mapping written as its pairs, so that it can hold a key twice."""


def with_duplicate(doc: Any, path: tuple[Any, ...], key: Any, value: Any, at: int) -> Any:
    """``doc`` with the mapping at ``path`` turned into pairs, ``key`` given again at ``at``."""
    doc = copy.deepcopy(doc)

    def pairs(node: Any) -> Any:
        if isinstance(node, dict):
            return Pairs((k, pairs(v)) for k, v in node.items())
        if isinstance(node, list):
            return [pairs(v) for v in node]
        return node

    out = pairs(doc)
    target = out
    for step in path:
        target = dict(target)[step] if isinstance(target, Pairs) else target[step]
    target.insert(at, (key, value))
    return out


def to_json(node: Any, indent: int) -> str:
    pad = "\n" + " " * indent if indent else ""
    if isinstance(node, Pairs):
        body = ("," + pad).join(f"{json.dumps(k)}: {to_json(v, indent)}" for k, v in node)
        return "{" + pad + body + pad + "}"
    if isinstance(node, list):
        return "[" + ", ".join(to_json(v, indent) for v in node) + "]"
    return json.dumps(node)


def to_yaml(node: Any, flow: bool) -> str:
    def compose(n: Any) -> yaml.Node:
        if isinstance(n, Pairs):
            return yaml.MappingNode(
                "tag:yaml.org,2002:map", [(compose(k), compose(v)) for k, v in n], flow_style=flow
            )
        if isinstance(n, list):
            return yaml.SequenceNode("tag:yaml.org,2002:seq", [compose(v) for v in n], flow_style=flow)
        return yaml.SafeDumper(None).represent_data(n)  # type: ignore[arg-type]

    return yaml.serialize(compose(node), Dumper=yaml.SafeDumper)

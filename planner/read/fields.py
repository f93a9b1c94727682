"""Checks every reader of an outside document shares: a mapping, a list, a name, a List of one kind.

Each raises :class:`~planner.base.errors.InvalidInput` naming the field in the shape the user wrote
it (``slices.items[3].spec``), so the command line exits 2 with one line and the operator reports
``phase: Invalid``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.base.errors import InvalidInput


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(where, f"expected a mapping, got {type(value).__name__}")
    return value


def list_of(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(where, f"expected a list, got {type(value).__name__}")
    return value


def required_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(where, "is required (a non-empty string)")
    return value


def items(doc: Any, what: str, kind: str) -> list[Mapping[str, Any]]:
    """The objects of a ``List``/``<kind>List`` as ``kubectl get -o yaml`` prints it, or one object."""
    doc = mapping(doc, what)
    if doc.get("kind") == kind:
        return [doc]
    if doc.get("kind") not in ("List", f"{kind}List"):
        raise InvalidInput(f"{what}.kind", f"expected List or {kind}List, got {doc.get('kind')!r}")
    # a mapping is checked by its type first: the field's name is spelled out on refusal only
    return [
        i if type(i) is dict else mapping(i, f"{what}.items[{n}]")
        for n, i in enumerate(list_of(doc.get("items") or [], f"{what}.items"))
    ]

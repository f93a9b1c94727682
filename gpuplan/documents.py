"""Read the documents the command line is given: files or standard input, YAML or JSON.

Notes
-----
``kubectl get nodes -o json`` and ``-o yaml`` both work, piped (``--nodes -``) or saved. JSON is
parsed as JSON (fast, and exact about what it is); everything else with libyaml when it is there.
Several YAML documents in one file are read as a ``List``, as kubectl does. A file that cannot be
read or parsed is :class:`~planner.base.errors.InvalidInput` naming the option, so the command exits
2 with one line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

from planner import InvalidInput

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster


def parse(text: str, source: str, what: str) -> list[Any]:
    """JSON when it looks like JSON, else YAML (one or more documents); empty ones are dropped."""
    if text.lstrip().startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except ValueError:
            pass  # YAML flow style also starts with a brace: let the YAML parser say what is wrong
    try:
        return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInput(what, f"{source}: not valid YAML or JSON{where}") from None


def load(path: str, what: str) -> Any:
    """One document from ``path`` (``-``: standard input); several YAML documents become a List."""
    source = "standard input" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except FileNotFoundError:
        raise InvalidInput(what, f"{path}: no such file") from None
    except OSError as e:
        raise InvalidInput(what, f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidInput(what, f"{source}: not UTF-8 text") from None
    docs = parse(text, source, what)
    if not docs:
        raise InvalidInput(what, f"{source}: the file is empty")
    if len(docs) > 1:  # several documents: treat them as a List (kubectl-style)
        return {"kind": "List", "items": docs}
    return docs[0]

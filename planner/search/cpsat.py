"""OR-Tools' CP-SAT, imported without pandas.

Notes
-----
``ortools.sat.python.cp_model`` imports pandas at module level, for its ``*_series`` helpers that
build variables from a ``pandas.Index``; gpuplan never calls them. Importing pandas costs about a
quarter of a second on every ``gpuplan plan`` that needs the solver, half of the total for the
benchmark's hard case (360 nodes, 97% full: 0.65 s with pandas, 0.43 s without, measured through
the command line). So the import below stands a placeholder module in for pandas while OR-Tools
loads, and takes it away again at once: only ``cp_model``'s own reference to it remains, and any
later ``import pandas`` gets the real library. When pandas is already loaded, or when a future
OR-Tools needs more of pandas at import time, the ordinary import is used.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING


def _load() -> types.ModuleType:
    name = "ortools.sat.python.cp_model"
    if "pandas" in sys.modules or name in sys.modules:
        return importlib.import_module(name)
    placeholder = types.ModuleType("pandas", "a stand-in while OR-Tools imports; see planner.search.cpsat")
    placeholder.Index = type("Index", (), {})  # type: ignore[attr-defined]
    placeholder.Series = type("Series", (), {})  # type: ignore[attr-defined]
    sys.modules["pandas"] = placeholder
    try:
        return importlib.import_module(name)
    except Exception:  # pragma: no cover - a future OR-Tools that needs more of pandas
        for mod in [m for m in sys.modules if m.startswith("ortools.sat.python.cp_model")]:
            del sys.modules[mod]
        del sys.modules["pandas"]
        return importlib.import_module(name)
    finally:
        if sys.modules.get("pandas") is placeholder:
            del sys.modules["pandas"]


if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:
    cp_model = _load()

__all__ = ["cp_model"]

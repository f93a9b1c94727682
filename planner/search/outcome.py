"""What one search of one resource type established (no solver needed to read it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from planner.base.codes import SolveStatus
from planner.search.place import NodeCounts

Progress = Callable[[str], None]  # one line of progress, for the command line's stderr


@dataclass
class Outcome:
    """A type's verdict; with a plan, its split per item (``choice``) and placement (``nodes``)."""

    status: SolveStatus
    choice: list[int] | None = None
    nodes: list[NodeCounts] | None = None
    score: Fraction | None = None
    bound: Fraction | None = None
    seconds: float = 0.0
    branches: int = 0
    notes: list[str] = field(default_factory=list)
    moved: int | None = None  # instances not where a previous plan had them (with --previous)
    # with devices known one by one: per item, node -> device names per instance, and how many
    # of its instances straddle domains
    devices: list[dict[str, list[list[str]]]] | None = None
    straddling: list[int] | None = None

"""``-o html`` and ``status NAME --html``: the plan's picture as one self-contained HTML page.

The view model and the page are the planner's (:func:`planner.build_view`,
:func:`planner.render_page`); the cluster's side of ``status --html`` is the operator's own
reader and page (:mod:`gpuplan_operator.view`), so the command line and the operator's ``/view``
draw a plan the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from planner import build_view, render_page, shown_result, why_not

if TYPE_CHECKING:
    from gpuplan_operator.view import ClusterRead

    from planner import PlanResult, PlanSpec, Snapshot


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def plan_page(spec: PlanSpec, snap: Snapshot, result: PlanResult, budget: float = 10.0) -> str:
    """The page of a plan made here: its cells, and per request the explanation's "why not"."""
    shown = shown_result(spec, result, why_not(result, budget))
    return render_page(build_view([shown], snap), generated=f"planned by gpuplan at {_now()}")


def status_page(read: ClusterRead, keys: list[str]) -> str:
    """The page of a plan (``namespace/name`` keys) as the cluster has it applied (its status);
    the cards of the cluster's other plans show as held by others."""
    from gpuplan_operator.view import page

    return page(read, only=keys, generated=f"read from the cluster at {_now()}")

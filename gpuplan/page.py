"""``-o html`` and ``status NAME --html``: the plan's picture as one self-contained HTML page.

The view model and the page are the planner's (:func:`planner.build_view`,
:func:`planner.render_page`); the cluster's side of ``status --html`` is the operator's own
reader and page (:mod:`gpuplan_operator.view`), so the command line and the operator's ``/view``
draw a plan the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from planner import build_view, render_page, shown_result, why_not

if TYPE_CHECKING:
    from gpuplan_operator.view import ClusterRead

    from planner import PlanResult, PlanSpec, Shared, Snapshot


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def plan_page(spec: PlanSpec, snap: Snapshot, result: PlanResult, budget: float = 10.0) -> str:
    """The page of a plan made here: its cells, and per request the explanation's "why not"."""
    shown = shown_result(spec, result, why_not(result, budget))
    return render_page(build_view([shown], snap), generated=f"planned by gpuplan at {_now()}")


def plans_page(answers: Sequence[Shared], snap: Snapshot, budget: float = 10.0) -> str:
    """The page of plans planned together here: each plan's cells, whether it was admitted and
    why not, and what each elastic request got."""
    shown = []
    for a in answers:
        one = shown_result(a.spec, a.result, why_not(a.result, budget))
        grants = {(g.operator, g.resource): g.text for g in a.grants}
        rows = tuple(
            replace(r, elastic=grants[(r.operator, r.resource)]) if (r.operator, r.resource) in grants else r
            for r in one.requests
        )
        message = one.message
        if not a.admitted:
            held = f" (the cards it needs are planned for {', '.join(a.holders)})" if a.holders else ""
            message = f"not admitted: {a.reason.value}{held}"
        shown.append(
            replace(one, requests=rows, priority=a.spec.priority, admitted=a.admitted, message=message)
        )
    return render_page(build_view(shown, snap), generated=f"planned by gpuplan at {_now()}")


def status_page(read: ClusterRead, keys: list[str]) -> str:
    """The page of a plan (``namespace/name`` keys) as the cluster has it applied (its status);
    the cards of the cluster's other plans show as held by others."""
    from gpuplan_operator.view import page

    return page(read, only=keys, generated=f"read from the cluster at {_now()}")

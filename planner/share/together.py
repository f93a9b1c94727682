"""Plan several plans on one cluster: the entry, :func:`plan_together`.

Notes
-----
A single plan with fixed counts is the case of one and is planned exactly as
:func:`planner.planning.plan` plans it, without loading the joint search
(:mod:`planner.share.joint`), which everything else goes to.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.base.codes import ConflictKind
from planner.model.result import PlanResult
from planner.model.result import Previous as PlanPrevious
from planner.model.spec import PlanSpec, Snapshot
from planner.planning import plan
from planner.search.outcome import Progress
from planner.share.outcome import Admission, Shared


def plan_together(
    specs: Sequence[PlanSpec],
    snap: Snapshot,
    previous: Sequence[PlanPrevious | None] | None = None,
    *,
    seconds: float = 60.0,
    workers: int = 1,
    polish_seconds: float = 0.5,
    progress: Progress | None = None,
) -> list[Shared]:
    """One answer per plan, in input order.

    ``specs``: the plans, oldest first. ``snap``: the cluster's free cards with no plan's
    instances counted. ``previous``: per plan, the placement it holds (None: it holds none).
    """
    prev = list(previous) if previous is not None else [None] * len(specs)
    if len(prev) != len(specs):
        raise ValueError("one previous placement (or None) per plan")
    if len(specs) == 1 and not any(r.elastic for r in specs[0].requests):
        result = plan(
            specs[0], snap, seconds=seconds, workers=workers, previous=prev[0],
            polish_seconds=polish_seconds, progress=progress,
        )  # fmt: skip
        return [_alone(specs[0], result)]
    from planner.share.joint import plan_jointly

    return plan_jointly(specs, snap, prev, seconds, workers)


def _alone(spec: PlanSpec, result: PlanResult) -> Shared:
    if result.feasible:
        return Shared(spec, True, Admission.ADMITTED, result)
    timed_out = any(c.kind is ConflictKind.TIMEOUT for c in result.conflicts)
    return Shared(spec, False, Admission.TIMED_OUT if timed_out else Admission.NO_ROOM, result)

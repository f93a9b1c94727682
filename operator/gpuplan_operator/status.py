"""Pure: a plan's outcome -> its ``status``, and the patch that gets there.

Notes
-----
Status is rebuilt from scratch on every reconcile and compared with what the plan already shows;
:func:`status_patch` returns None when nothing changed, so a re-run on an unchanged plan writes
nothing. Nothing time-dependent goes in except ``lastTransitionTime``, which is carried over while
a condition keeps its status.

What stays when a plan cannot be applied: an Infeasible, Invalid or dry-run outcome leaves the
cluster as the last successful apply left it, so ``allocations``, ``score``, ``applied`` and the
``Applied``/``Ready`` conditions keep describing that state; only ``phase``, ``message`` and
``Planned`` speak about the new attempt. ``applied`` (units per node, PriorityClasses) is what
other plans subtract and what deletion may clean up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planner import Admission, PlanResult, Shared


class Phase(StrEnum):
    """``status.phase``: where the plan stands (the PHASE column)."""

    PLANNING = "Planning"  # a new generation is being planned, or a dry run reports its plan
    APPLIED = "Applied"  # the cluster holds the plan
    INFEASIBLE = "Infeasible"  # no deployable plan; the previous placement stays
    INVALID = "Invalid"  # the spec can never plan; only status is written
    ERROR = "Error"  # reading or writing the cluster failed; retried


class Reason(StrEnum):
    """Condition and Event reasons (a conflict's :class:`~planner.base.codes.ConflictKind` is one too)."""

    PLAN_FOUND = "PlanFound"
    PLANNED = "Planned"  # event: the first placement
    REPLANNED = "Replanned"  # event: the placement moved
    APPLIED = "Applied"
    READY = "Ready"  # event: every pod scheduled
    DRY_RUN = "DryRun"
    INVALID = "Invalid"
    INFEASIBLE = "Infeasible"  # no plan, and no conflict to name (e.g. no usable snapshot)
    APPLY_FAILED = "ApplyFailed"
    API_ERROR = "ApiError"
    NO_PODS = "NoPods"
    ALL_SCHEDULED = "AllScheduled"
    PENDING = "Pending"
    MISPLACED = "Misplaced"
    PREEMPTED = "Preempted"  # not admitted: plans before it hold the cards it needs (named)
    SHRUNK = "Shrunk"  # event: elastic requests gave cards to plans before it
    GREW = "Grew"  # event: elastic requests took cards that came free
    WAITING = "Waiting"  # gang: pods gated until every planned node has their cards
    GANG_TIMED_OUT = "TimedOut"  # gang: released pods not scheduled in time; re-planned around it
    RELEASED = "Released"  # event: the plan's gated pods were released together


OUR_KEYS = (
    "phase",
    "observedGeneration",
    "score",
    "optimal",
    "cardsPlaced",
    "cardsRequested",
    "cards",
    "allocations",
    "conflicts",
    "applied",
    "conditions",
    "message",
    "warnings",
    "cardsMax",
    "admission",
    "heldBy",
    "elastic",
)
APPLIED_TEXT = "node labels, priority classes and outputs match the plan"
DRY_RUN_TEXT = "dryRun is true: nothing was written"
_KEEP_ON_FAILURE = ("score", "optimal", "cardsPlaced", "cardsRequested", "cards", "allocations", "applied")


@dataclass(frozen=True)
class Readiness:
    """Whether every pod the plan owns is scheduled (the ``Ready`` condition)."""

    ready: bool
    reason: Reason
    message: str


def condition(
    type_: str,
    status: bool,
    reason: str,  # a Reason or a ConflictKind
    message: str,
    generation: int,
    previous: Sequence[Mapping[str, Any]] | None,
    now: str,
) -> dict[str, Any]:
    """A metav1.Condition; ``lastTransitionTime`` moves only when ``status`` flips."""
    text = "True" if status else "False"
    since = now
    for old in previous or []:
        if old.get("type") == type_ and old.get("status") == text and old.get("lastTransitionTime"):
            since = str(old["lastTransitionTime"])
    return {
        "type": type_,
        "status": text,
        "reason": str(reason),
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since,
    }


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _kept(old: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for c in old.get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def progress_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether ``new`` differs from ``old`` only in the ``Ready`` condition's message: the same
    conditions with the same status and reason, and nothing else of ours changed (the count of
    pods scheduled or gated moved on)."""
    if status_patch(old, new) != {"conditions": new.get("conditions")}:
        return False
    before, after = _kept(old, "Ready"), _kept(new, "Ready")
    if before is None or after is None or before.get("message") == after.get("message"):
        return False

    def without_message(status: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in c.items() if k != "message"} for c in status.get("conditions") or []]

    return without_message(old) == without_message(new)


def _conditions(*conds: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [c for c in conds if c is not None]


def plan_fields(result: PlanResult) -> dict[str, Any]:
    """score, optimal, cards and allocations of a feasible result (as ``gpuplan plan -o json``)."""
    doc = result.to_json()
    placed, requested = result.cards_placed, result.cards_requested
    out = {
        "score": doc["score"],
        "optimal": bool(doc["optimal"]),
        "cardsPlaced": placed,
        "cardsRequested": requested,
        "cards": f"{placed}/{requested}",
        "allocations": doc["allocations"],
    }
    if result.warnings:  # what the kubelet may refuse, and how NUMA zones were counted
        out["warnings"] = list(result.warnings)
    return out


def summary(result: PlanResult) -> str:
    nodes = {n for a in result.allocations for n, _ in a.nodes}
    quality = "optimal" if result.optimal else "best found in time"
    return (
        f"{result.cards_placed}/{result.cards_requested} cards placed on {len(nodes)} nodes, "
        f"score {_number(float(result.score) if result.score is not None else None)} ({quality})"
    )


def planning_status(old: Mapping[str, Any], generation: int) -> dict[str, Any]:
    """Shown while a new spec generation is being planned; everything else stays as it was."""
    out = {k: v for k, v in old.items() if k in OUR_KEYS}
    out["phase"] = Phase.PLANNING.value
    out["message"] = f"planning generation {generation}"
    return out


def applied_status(
    old: Mapping[str, Any],
    generation: int,
    result: PlanResult,
    applied: Mapping[str, Any],
    readiness: Readiness,
    now: str,
) -> dict[str, Any]:
    prev = old.get("conditions")
    text = summary(result)
    return {
        "phase": Phase.APPLIED.value,
        "observedGeneration": generation,
        **plan_fields(result),
        "applied": dict(applied),
        "conditions": _conditions(
            condition("Planned", True, Reason.PLAN_FOUND, text, generation, prev, now),
            condition("Applied", True, Reason.APPLIED, APPLIED_TEXT, generation, prev, now),
            condition("Ready", readiness.ready, readiness.reason, readiness.message, generation, prev, now),
        ),
        "message": text,
    }


def dry_run_status(old: Mapping[str, Any], generation: int, result: PlanResult, now: str) -> dict[str, Any]:
    """dryRun: the proposed plan is reported; whatever an earlier apply left stays in place."""
    prev = old.get("conditions")
    text = summary(result)
    out = {
        "phase": Phase.PLANNING.value,
        "observedGeneration": generation,
        **plan_fields(result),
        "conditions": _conditions(
            condition("Planned", True, Reason.PLAN_FOUND, text, generation, prev, now),
            condition("Applied", False, Reason.DRY_RUN, DRY_RUN_TEXT, generation, prev, now),
            _kept(old, "Ready"),
        ),
        "message": f"dry run: {text}; nothing written",
    }
    if old.get("applied"):
        out["applied"] = old["applied"]
    return out


def _failed(
    old: Mapping[str, Any],
    generation: int,
    phase: Phase,
    reason: str,
    message: str,
    now: str,
    extra: Mapping[str, Any] | None = None,
    planned: str | None = None,
) -> dict[str, Any]:
    """Status of an attempt that wrote nothing (Invalid, Infeasible) or failed writing (Error).

    ``planned``: the plan's summary when planning itself succeeded (Error during apply).
    """
    prev = old.get("conditions")
    applied_before = bool(old.get("applied"))
    if planned is not None:
        planned_cond = condition("Planned", True, Reason.PLAN_FOUND, planned, generation, prev, now)
    else:
        planned_cond = condition("Planned", False, reason, message, generation, prev, now)
    if applied_before and phase is not Phase.ERROR:
        applied_cond = _kept(old, "Applied")
    else:
        applied_cond = condition("Applied", False, reason, message, generation, prev, now)
    out: dict[str, Any] = {k: old[k] for k in _KEEP_ON_FAILURE if k in old}
    out |= {
        "phase": phase.value,
        "observedGeneration": generation,
        "conditions": _conditions(planned_cond, applied_cond, _kept(old, "Ready")),
        "message": message,
    }
    out |= dict(extra or {})
    return out


def invalid_status(old: Mapping[str, Any], generation: int, error: str, now: str) -> dict[str, Any]:
    keep = " (the previous placement stays applied)" if old.get("applied") else ""
    return _failed(old, generation, Phase.INVALID, Reason.INVALID, f"invalid spec: {error}{keep}", now)


def infeasible_status(
    old: Mapping[str, Any],
    generation: int,
    reason: str,
    now: str,
    conflicts: Sequence[Mapping[str, Any]] = (),
    kind: str = Reason.INFEASIBLE,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """No deployable plan (or no usable snapshot): nothing written, the old placement stays.

    ``kind`` is the ``Planned`` condition's reason: the first conflict's
    :class:`~planner.base.codes.ConflictKind` (``Overbooked``, ``Packing``, ...), the same word as the
    ``gpuplan_conflicts_total`` label and the JSON output's ``kind``.
    """
    keep = "; the previous placement stays applied" if old.get("applied") else ""
    extra: dict[str, Any] = {"conflicts": [dict(c) for c in conflicts]} if conflicts else {}
    if warnings:
        extra["warnings"] = list(warnings)
    message = f"no deployable plan: {reason}{keep}"
    return _failed(old, generation, Phase.INFEASIBLE, kind, message, now, extra)


def error_status(
    old: Mapping[str, Any], generation: int, error: str, now: str, planned: str | None = None
) -> dict[str, Any]:
    message = f"apply failed: {error}"
    return _failed(old, generation, Phase.ERROR, Reason.APPLY_FAILED, message, now, planned=planned)


def with_readiness(old: Mapping[str, Any], readiness: Readiness, generation: int, now: str) -> dict[str, Any]:
    """The same status with the ``Ready`` condition refreshed (pods got scheduled, or not)."""
    out = {k: v for k, v in old.items() if k in OUR_KEYS}
    prev = old.get("conditions") or []
    ready = condition("Ready", readiness.ready, readiness.reason, readiness.message, generation, prev, now)
    out["conditions"] = [c for c in prev if c.get("type") != "Ready"] + [ready]
    return out


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """An RFC 7386 merge patch turning ``old`` into ``new`` (maps recurse, removals are null)."""
    out: dict[str, Any] = {}
    for k, v in new.items():
        if k not in old:
            out[k] = v
        elif isinstance(v, Mapping) and isinstance(old[k], Mapping):
            sub = merge_diff(old[k], v)
            if sub:
                out[k] = sub
        elif old[k] != v:
            out[k] = v
    out |= {k: None for k in old if k not in new}
    return out


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch from ``old`` to ``new`` over our keys only, or None when nothing changes.

    Keys we no longer set become ``null``; nested maps (``applied.units``) are diffed key by key,
    because a merge patch would otherwise keep a node the plan left. Keys we do not own
    (another controller's) are left alone.
    """
    ours_old = {k: v for k, v in old.items() if k in OUR_KEYS}
    ours_new = {k: v for k, v in new.items() if k in OUR_KEYS}
    return merge_diff(ours_old, ours_new) or None


def shared_status(
    old: Mapping[str, Any], applied: Mapping[str, Any], shared: Shared, now: str
) -> dict[str, Any]:
    """The status of a plan planned with the others: ``applied`` (what :func:`applied_status`
    says of what was written) with its admission, its elastic requests and CARDS as placed/max.

    A plan that is not admitted is ``Infeasible`` (condition reason ``Preempted`` naming the plans
    that hold its cards, or ``NoRoom``/``TimedOut``) while the instances it keeps stay applied.
    """
    out = dict(applied)
    placed = int(out.get("cardsPlaced") or 0)
    out["cardsMax"] = shared.cards_max
    out["cards"] = f"{placed}/{shared.cards_max}"
    out["admission"] = shared.reason.value
    below = [g.text for g in shared.grants if g.why is not None]
    if shared.grants:
        out["elastic"] = [g.to_json() for g in shared.grants]
    if shared.admitted:
        if below:
            out["message"] = f"{out['message']}; {'; '.join(below)}"
        return out
    generation = int(out["observedGeneration"])
    if shared.reason is Admission.PREEMPTED:
        verb = "holds" if len(shared.holders) == 1 else "hold"
        why = f"preempted: {', '.join(shared.holders)} (before it in the order) {verb} the cards it needs"
    else:
        why = shared.result.reason or "its minimum does not fit"
    kept = sum(a.instances for a in shared.kept)
    keeps = (
        f"; the previous placement stays applied where no admitted plan needs its cards ({kept} instances)"
        if kept
        else ""
    )
    message = f"no deployable plan: {why}{keeps}"
    if shared.holders:
        out["heldBy"] = list(shared.holders)
    if shared.result.conflicts:
        out["conflicts"] = [c.to_json() for c in shared.result.conflicts]
    prev = old.get("conditions")
    conds = [c for c in out.get("conditions") or [] if c.get("type") != "Planned"]
    planned = condition("Planned", False, shared.reason.value, message, generation, prev, now)
    out["conditions"] = [planned, *conds]
    out["phase"] = Phase.INFEASIBLE.value
    out["message"] = message
    return out


def share_events(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Events for what planning together changed: preempted, shrunk, grew (type, reason, text)."""
    out: list[tuple[str, str, str]] = []
    if new.get("admission") == Admission.PREEMPTED and old.get("admission") != Admission.PREEMPTED:
        out.append(("Warning", Reason.PREEMPTED, str(new.get("message"))))
        return out
    if not old.get("applied") or "cardsPlaced" not in old:
        return out
    before, after = int(old.get("cardsPlaced") or 0), int(new.get("cardsPlaced") or 0)
    if after < before:
        out.append(("Normal", Reason.SHRUNK, f"{before} -> {after} cards: {new.get('message')}"))
    elif after > before:
        out.append(("Normal", Reason.GREW, f"{before} -> {after} cards: {new.get('message')}"))
    return out

"""Plan a whole spec: per type, the fast path, then the exact search, then a conflict if none fits.

Notes
-----
Types are solved one after another, each with a fair share of what is left of the time budget
(a type that finishes early leaves its time to the next). The fast path answers most re-plans
without a solver: if the best split of every request fits, the score equals the upper bound.
A type whose requests each have one split is a pure packing: bounds (L2, the LP bound) refute it
at once where they can, and a pattern model packs it where the greedy does not
(:mod:`planner.search.patterns`); what they leave open goes to the exact search.

When a type has no plan, a deletion filter shrinks its requests to a conflict: requests that
cannot fit together. It has a small fixed budget (:data:`CONFLICT_SECONDS`, within what is left of
the time limit), so a refutation's command ends soon after the proof however long the proof took.
It is called minimal only when dropping any one of them was shown to let the rest fit; otherwise
(a filter cut short by its budget among them) it says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from fractions import Fraction

from planner.base.codes import ConflictKind, Method, SolveStatus
from planner.model.devices import natural
from planner.model.options import TypeProblem, build_problems
from planner.model.result import Allocation, Conflict, PlanResult, TypeStats, gap
from planner.model.result import Previous as PreviousPlan
from planner.model.spec import PlanSpec, ResourceKind, Snapshot
from planner.node.pods import concerned, cpu_by_node, cpu_note, cpu_warnings, layout
from planner.search.outcome import Outcome, Progress
from planner.search.place import Previous, PreviousDevices, greedy_place, improvable, moved

# at most this long to shrink one type's conflict: it explains a refutation, it does not decide, so
# it must not double the command's time (half the type's share once took a 4.5 s proof to 9.5 s)
CONFLICT_SECONDS = 1.5
PACKING_SHARE = 0.6  # of a pure packing's time, what the pattern model may use first
PER_NODE_CELLS = 1_000  # a per-node model of more (requests × nodes) cells is no help to a packing


def _packing_share(problem: TypeProblem) -> float:
    """The pattern model's share of a pure packing's time: all of it, unless an exact model that
    is small (the node-class model, or a per-node one of a few thousand cells) can use the rest."""
    from planner.search import classes

    if len(problem.items) * len(problem.nodes) <= PER_NODE_CELLS or classes.build(problem) is not None:
        return PACKING_SHARE
    return 1.0


def free_summary(problem: TypeProblem) -> str:
    """Free cards per node, grouped: ``8 (×18), 7 (×18), 0 (×2)``."""
    counts: dict[int, int] = {}
    for _, f in problem.nodes:
        counts[f] = counts.get(f, 0) + 1
    parts = [f"{f} (×{n})" if n > 1 else str(f) for f, n in sorted(counts.items(), reverse=True)]
    return ", ".join(parts) or "none"


def _subproblem(problem: TypeProblem, subset: list[int]) -> TypeProblem:
    """The type with only these requests (renumbered), on the same nodes."""
    return TypeProblem(
        problem.resource,
        problem.nodes,
        tuple(replace(it, index=n) for n, it in enumerate(problem.items[i] for i in subset)),
    )


def _feasible(problem: TypeProblem, subset: list[int], seconds: float) -> bool | None:
    """Can these items be placed together with some choice of splits? None: not decided in time.

    Cheapest first: counting, the greedy (a placement proves it), L2, then the packing model for
    a pure packing (which finds or refutes most at once), then the exact search.
    """
    if not subset:
        return True
    if sum(problem.items[i].request.cards for i in subset) > sum(f for _, f in problem.nodes):
        return False
    sub = _subproblem(problem, subset)
    if greedy_place(sub, [0] * len(subset)) is not None:
        return True
    from planner.search import bounds

    if bounds.refute_l2(sub) is not None:
        return False
    start = time.monotonic()
    if sub.pure_packing:
        from planner.search import patterns

        share = _packing_share(sub)
        pk = patterns.solve(sub, seconds * share)
        if pk.nodes is not None:
            return True
        if pk.how == "refuted":
            return False
        if share == 1.0:
            return None
    from planner.search.solver import solve

    left = max(0.05, seconds - (time.monotonic() - start))
    out = solve(problem, seconds=left, subset=subset, optimize=False)
    return {SolveStatus.INFEASIBLE: False, SolveStatus.UNKNOWN: None}.get(out.status, True)


def conflict(problem: TypeProblem, seconds: float = 10.0, proof: Outcome | None = None) -> Conflict:
    """A set of this type's requests that cannot be placed together, irreducible where shown so.

    ``proof``: the outcome that refuted the type, whose notes may name a smaller set to start from.
    """
    found = _conflict(problem, seconds, proof)
    notes = [n for n in (problem.note, problem.cpu_note) if n]
    if not notes:
        return found
    return replace(found, detail="; ".join([found.detail, *notes]))


def _shape(problem: TypeProblem, i: int) -> tuple[object, ...]:
    """Requests of one shape are interchangeable: dropping either leaves the same question."""
    it = problem.items[i]
    return (it.strategy, it.splits)


def _conflict(problem: TypeProblem, seconds: float, proof: Outcome | None) -> Conflict:
    """A set of this type's requests that cannot be placed together.

    A request with no admissible split is a conflict alone. Otherwise a deletion filter drops
    every request whose removal leaves the rest still infeasible, starting from the smallest set
    known not to fit: the fewest largest requests that overflow the free cards, or the requests
    a bound's certificate needs. The set is called minimal only when every request left was
    shown needed (dropping it lets the rest fit); dropping requests never makes a packing
    harder, so a request shown needed stays needed as the set shrinks.
    """
    name = problem.resource.name
    for it in problem.items:
        if not it.splits:
            why = "; ".join(f"{k}×{g}: {w}" for k, g, w in it.rejected) or "no split"
            return Conflict(
                name, ConflictKind.NO_SPLIT, (it.label,), f"{it.label} has no admissible split ({why})"
            )
    total_free = sum(f for _, f in problem.nodes)
    where = f"{len(problem.nodes)} usable nodes, free cards per node: {free_summary(problem)}"
    deadline = time.monotonic() + seconds
    core = [it.index for it in problem.items]
    why = ""
    if sum(it.request.cards for it in problem.items) > total_free:
        # the fewest largest requests that overflow the free cards: each is needed for the
        # overflow, though a smaller set may still not pack (the filter below looks)
        picked: list[int] = []
        for it in sorted(problem.items, key=lambda i: (-i.request.cards, i.index)):
            picked.append(it.index)
            if sum(problem.items[i].request.cards for i in picked) > total_free:
                break
        core = sorted(picked)
    else:
        from planner.search import bounds

        refuted = bounds.refute_l2(problem) or (
            bounds.refute(problem, min(2.0, seconds / 4)) if proof is not None else None
        )
        if refuted is not None:
            core, why = sorted(refuted.items), refuted.reason
    undecided = False
    # shapes whose drop was shown to fit: dropping requests never hurts, so that stays shown for
    # every smaller core, and requests of one shape are interchangeable
    fits: set[tuple[object, ...]] = set()
    # try to drop the small requests first, so the conflict names the ones that crowd the nodes
    for idx in sorted(core, key=lambda i: (problem.items[i].request.cards, i)):
        if _shape(problem, idx) in fits:
            continue
        trial = [i for i in core if i != idx]
        left = deadline - time.monotonic()
        verdict = _feasible(problem, trial, min(left, 2.0)) if left > 0 else None
        if verdict is False:
            core = trial
        elif verdict is None:
            undecided = True
        else:
            fits.add(_shape(problem, idx))
    minimal = not undecided or len(core) == 1
    items = [problem.items[i] for i in core]
    cards = sum(it.request.cards for it in items)
    labels = tuple(it.label for it in items)
    if cards > total_free:
        kind = ConflictKind.OVERBOOKED
        detail = f"together they need {cards} {name} cards, only {total_free} are free ({where})"
    else:
        kind = ConflictKind.PACKING
        detail = (
            f"{', '.join(f'{it.label} ({it.request.cards})' for it in items)}: {cards} {name} cards "
            f"cannot be split and placed on {where}"
        )
    if why:
        detail += f" ({why})"
    if not minimal:
        detail += "; these cannot fit together; not shown minimal within the time budget"
    return Conflict(name, kind, labels, detail, minimal)


def _progress(out: Outcome) -> str | None:
    """How far a search that ran out of time got: its best plan against its bound, or its notes."""
    if out.status is SolveStatus.FEASIBLE and out.score is not None and out.bound is not None:
        g = gap(out.score, out.bound)
        pct = f", gap {float(g) * 100:.2f}%" if g is not None else ""
        return f"best found {float(out.score):.6g}, bound {float(out.bound):.6g}{pct}"
    if out.status is SolveStatus.UNKNOWN and out.notes:
        return "; ".join(out.notes)
    return None


def _zone_of(problem: TypeProblem) -> dict[tuple[str, str], str]:
    """(node, made-up card name) -> its NUMA zone, for the nodes whose domains are zones."""
    return {(n, card): d.name for n in problem.zoned for d in problem.domains[n] for card in d.free}


def _counted(zones: Iterable[str]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for z in zones:
        counts[z] = counts.get(z, 0) + 1
    return tuple(sorted(counts.items(), key=lambda zc: natural(zc[0])))


def allocations_of(problem: TypeProblem, out: Outcome) -> list[Allocation]:
    assert out.choice is not None and out.nodes is not None
    allocations = []
    zone_of = _zone_of(problem) if problem.zoned else {}
    # per item: its devices and straddling, when the search chose devices (read once, not
    # remade for every item: 50 plans read off a joint answer make 8,000 allocations)
    every_devices = out.devices or [{}] * len(problem.items)
    every_straddling = out.straddling or [0] * len(problem.items)
    for it in problem.items:
        split = it.splits[out.choice[it.index]]
        devices = every_devices[it.index]
        named = {n: lists for n, lists in devices.items() if n not in problem.zoned}
        # without DRA the cards have no names: each instance records the zone(s) it counted on
        zones = {
            n: tuple(_counted(zone_of[n, c] for c in cards) for cards in lists)
            for n, lists in devices.items()
            if n in problem.zoned
        }
        allocations.append(
            Allocation(
                operator=it.label,
                resource=problem.resource.name,
                strategy=it.strategy,
                instances=split.instances,
                units=split.units,
                nodes=tuple(sorted(out.nodes[it.index].items())),
                term=split.score,
                devices=tuple(sorted((n, tuple(tuple(i) for i in lists)) for n, lists in named.items()))
                if named
                else (),
                straddling=every_straddling[it.index],
                zones=tuple(sorted(zones.items())) if zones else (),
            )
        )
    return allocations


def solve_type(
    problem: TypeProblem,
    seconds: float,
    *,
    workers: int = 1,
    previous: Previous | None = None,
    previous_devices: PreviousDevices | None = None,
    polish_seconds: float = 0.5,
    progress: Progress | None = None,
) -> tuple[Outcome, Method]:
    """Solve one type; returns the outcome and the method that decided it.

    The solver (and OR-Tools with it) is imported only when the fast path does not decide: a
    re-plan that keeps every best split never pays for it.
    """
    start = time.monotonic()
    if any(not it.splits for it in problem.items):
        return Outcome(status=SolveStatus.INFEASIBLE), Method.NONE
    if sum(it.request.cards for it in problem.items) > sum(f for _, f in problem.nodes):
        return Outcome(status=SolveStatus.INFEASIBLE), Method.COUNTING
    if problem.topology_aware:
        out, method = _solve_with_devices(
            problem, seconds, workers, previous, previous_devices, progress, start
        )
    else:
        out, method = _solve(problem, seconds, workers, previous, progress)
        if out.choice is not None and out.nodes is not None and out.score is not None and polish_seconds > 0:
            picked = improvable(problem, out.choice, out.nodes, previous or {})
            if picked:
                from planner.search.solver import polish

                polish(problem, out, polish_seconds, picked, workers=workers, previous=previous)
    if previous is not None and out.choice is not None and out.nodes is not None:
        out.moved = moved(problem, out.choice, out.nodes, previous)
    out.seconds = time.monotonic() - start
    return out, method


def _solve(
    problem: TypeProblem, seconds: float, workers: int, previous: Previous | None, progress: Progress | None
) -> tuple[Outcome, Method]:
    """The score: the fast path when the best splits place greedily, else the exact search."""
    best = [0] * len(problem.items)
    placed = greedy_place(problem, best, previous)
    ub = problem.upper_bound
    if placed is not None:
        return Outcome(SolveStatus.OPTIMAL, best, placed, ub, ub), Method.FAST_PATH
    # the bounds and the pattern model are loaded only for a type the greedy does not place:
    # a plan command whose every type places at once never imports them (importing this module
    # took 22 ms with them, 5 ms without, bytecode not cached: PYTHONDONTWRITEBYTECODE, load 5)
    from planner.search import bounds

    start = time.monotonic()
    cheap = bounds.refute_l2(problem)
    if cheap is not None:
        return Outcome(SolveStatus.INFEASIBLE, notes=[cheap.reason]), Method.BOUND
    progress_note, share = None, 0.0
    if problem.pure_packing:
        from planner.search import patterns

        # a pure packing (one split each): the pattern model finds or refutes it, most often at
        # once; what it leaves undecided goes to the exact search with the time that is left,
        # when that search has a model small enough to be worth building
        share = _packing_share(problem)
        pk = patterns.solve(problem, seconds * share)
        if pk.nodes is not None:
            return Outcome(SolveStatus.OPTIMAL, best, pk.nodes, ub, ub), Method.PATTERNS
        if pk.how == "refuted":
            return Outcome(SolveStatus.INFEASIBLE, notes=[pk.reason]), Method.BOUND
        progress_note = pk.reason
    left = seconds - (time.monotonic() - start)
    if progress_note is not None and (left < 0.05 or share == 1.0):
        return Outcome(SolveStatus.UNKNOWN, notes=[progress_note]), Method.PATTERNS
    from planner.search.solver import solve

    out = solve(problem, seconds=max(0.05, left), workers=workers, previous=previous, progress=progress)
    if out.status is SolveStatus.UNKNOWN and progress_note:
        out.notes.append(progress_note)
    return out, Method.CP_SAT


def _solve_with_devices(
    problem: TypeProblem,
    seconds: float,
    workers: int,
    previous: Previous | None,
    previous_devices: PreviousDevices | None,
    progress: Progress | None,
    start: float,
) -> tuple[Outcome, Method]:
    """Devices known one by one: the score as usual (unless an operator requires its domain), then
    the devices of every instance, fewest straddling domains, most cards left in whole domains."""
    from planner.node import topology

    score = None
    method = Method.CP_SAT
    if not topology.required_anywhere(problem):
        score, method = _solve(problem, seconds / 2, workers, previous, progress)
        if score.status is SolveStatus.INFEASIBLE:
            return score, method
    left = max(0.1, seconds - (time.monotonic() - start))
    out = topology.solve(
        problem,
        seconds=left,
        workers=workers,
        score=score,
        previous=previous,
        previous_devices=previous_devices,
    )
    return out, method


def plan(
    spec: PlanSpec,
    snap: Snapshot,
    *,
    seconds: float = 60.0,
    workers: int = 1,
    previous: PreviousPlan | None = None,
    polish_seconds: float = 0.5,
    progress: Progress | None = None,
) -> PlanResult:
    """Find the highest-scoring deployable plan (see :mod:`planner.search.solver` for how)."""
    deadline = time.monotonic() + seconds
    problems = build_problems(spec, snap)
    # GPU types first: their pods' CPU requests are not free for the CPU types planned after them
    order = sorted(range(len(problems)), key=lambda i: problems[i].resource.kind is not ResourceKind.GPU)
    placed: dict[int, list[Allocation]] = {}
    failed: dict[int, Conflict] = {}
    stats: dict[int, TypeStats] = {}
    score, bound = Fraction(0), Fraction(0)
    optimal, unknown = True, []
    moves: int | None = None if previous is None else 0
    cpu_done = False
    for step, i in enumerate(order):
        if problems[i].resource.kind is ResourceKind.CPU and not cpu_done:
            cpu_done = True
            problems = _after_gpu_pods(spec, snap, problems, [a for j in sorted(placed) for a in placed[j]])
        problem = problems[i]
        share = max(0.05, (deadline - time.monotonic()) / (len(problems) - step))
        prev, devices = None, None
        if previous is not None:
            mine = {op: v for (op, res), v in previous.items() if res == problem.resource.name}
            prev = {op: (v.units, v.nodes) for op, v in mine.items()}
            devices = {op: v.devices for op, v in mine.items() if v.devices}
        out, method = solve_type(
            problem,
            share,
            workers=workers,
            previous=prev,
            previous_devices=devices,
            polish_seconds=polish_seconds,
            progress=progress,
        )
        stats[i] = TypeStats(
            problem.resource.name,
            len(problem.nodes),
            len(problem.items),
            method,
            out.status,
            out.seconds,
            out.branches,
            problem.upper_bound,
            _progress(out),
        )
        if out.status is SolveStatus.INFEASIBLE:
            # the conflict search explains, it does not decide: a small fixed budget, within
            # half of the type's share and what is left of the limit (a moment to try, at least)
            left = max(0.2, deadline - time.monotonic())
            failed[i] = conflict(problem, seconds=min(CONFLICT_SECONDS, share / 2, left), proof=out)
            continue
        if out.choice is None or out.nodes is None:
            detail = "; ".join(["no plan found within the time budget (not proven impossible)", *out.notes])
            labels = tuple(it.label for it in problem.items)
            failed[i] = Conflict(problem.resource.name, ConflictKind.TIMEOUT, labels, detail, minimal=False)
            unknown.append(problem.resource.name)
            continue
        placed[i] = allocations_of(problem, out)
        if moves is not None:
            moves += out.moved or 0
        assert out.score is not None and out.bound is not None
        score += out.score
        bound += out.bound
        optimal = optimal and out.status is SolveStatus.OPTIMAL
    allocations = [a for i in sorted(placed) for a in placed[i]]
    conflicts = [failed[i] for i in sorted(failed)]
    groups = layout(spec, allocations) if concerned(spec, allocations) else []
    warnings = (*(n for p in problems for n in p.zone_notes), *cpu_warnings(problems, groups))
    pod_cpu = tuple(sorted(cpu_by_node(problems, groups).items()))
    if conflicts:
        return PlanResult(
            feasible=False,
            optimal=not unknown,
            score=None,
            bound=None,
            allocations=(),
            reason="; ".join(f"{c.resource}: {c.detail}" for c in conflicts),
            conflicts=tuple(conflicts),
            stats=tuple(stats[i] for i in sorted(stats)),
            problems=tuple(problems),
            partial=tuple(allocations),
            warnings=warnings,
        )
    return PlanResult(
        feasible=True,
        optimal=optimal,
        score=score,
        bound=bound,
        allocations=tuple(allocations),
        stats=tuple(stats[i] for i in sorted(stats)),
        problems=tuple(problems),
        moved=moves,
        warnings=warnings,
        pod_cpu=pod_cpu,
    )


def _after_gpu_pods(
    spec: PlanSpec, snap: Snapshot, problems: list[TypeProblem], gpu: list[Allocation]
) -> list[TypeProblem]:
    """The CPU types' problems again, with the CPU that the GPU pods request taken on their nodes."""
    if not any(spec.operator(a.operator).cpu_request is not None for a in gpu):
        return problems
    taken = cpu_by_node(problems, layout(spec, gpu))
    if not taken:
        return problems
    cpu = [p.resource.name for p in problems if p.resource.kind is ResourceKind.CPU]
    rebuilt = {
        p.resource.name: p
        for p in build_problems(spec, snap.using({n: {"cpu": m} for n, m in taken.items()}), cpu)
    }
    out = []
    for p in problems:
        if p.resource.name in rebuilt:
            fresh = rebuilt[p.resource.name]
            usable = {n for n, _ in fresh.nodes}
            p = replace(fresh, cpu_note=cpu_note({n: m for n, m in taken.items() if n in usable}))
        out.append(p)
    return out

"""Plan a whole spec: per type, the fast path, then the exact search, then a conflict if none fits.

Notes
-----
Types are solved one after another, each with a fair share of what is left of the time budget
(a type that finishes early leaves its time to the next). The fast path answers most re-plans
without a solver: if the best split of every request fits, the score equals the upper bound.
When a type has no plan, a deletion filter shrinks its requests to an irreducible conflict:
the requests that cannot fit together, such that dropping any one of them lets the rest fit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from fractions import Fraction

from planner.base.codes import ConflictKind, Method, SolveStatus
from planner.model.devices import natural
from planner.model.options import Item, TypeProblem, build_problems
from planner.model.result import Allocation, Conflict, PlanResult, TypeStats
from planner.model.result import Previous as PreviousPlan
from planner.model.spec import PlanSpec, ResourceKind, Snapshot
from planner.node.pods import concerned, cpu_by_node, cpu_note, cpu_warnings, layout
from planner.search.outcome import Outcome, Progress
from planner.search.place import Previous, PreviousDevices, greedy_place, improvable, moved

CONFLICT_SECONDS = 10.0  # at most this long to shrink one type's conflict


def free_summary(problem: TypeProblem) -> str:
    """Free cards per node, grouped: ``8 (×18), 7 (×18), 0 (×2)``."""
    counts: dict[int, int] = {}
    for _, f in problem.nodes:
        counts[f] = counts.get(f, 0) + 1
    parts = [f"{f} (×{n})" if n > 1 else str(f) for f, n in sorted(counts.items(), reverse=True)]
    return ", ".join(parts) or "none"


def _feasible(problem: TypeProblem, subset: list[int], seconds: float) -> bool | None:
    """Can these items be placed together with some choice of splits? None: not decided in time."""
    if not subset:
        return True
    if sum(problem.items[i].request.cards for i in subset) > sum(f for _, f in problem.nodes):
        return False
    sub = TypeProblem(
        problem.resource,
        problem.nodes,
        tuple(replace(it, index=n) for n, it in enumerate(problem.items[i] for i in subset)),
    )
    if greedy_place(sub, [0] * len(subset)) is not None:
        return True
    from planner.search.solver import solve

    out = solve(problem, seconds=seconds, subset=subset, optimize=False)
    return {SolveStatus.INFEASIBLE: False, SolveStatus.UNKNOWN: None}.get(out.status, True)


def conflict(problem: TypeProblem, seconds: float = 10.0) -> Conflict:
    """An irreducible set of this type's requests that cannot be placed together (see _conflict)."""
    found = _conflict(problem, seconds)
    notes = [n for n in (problem.note, problem.cpu_note) if n]
    if not notes:
        return found
    return Conflict(found.resource, found.kind, found.operators, "; ".join([found.detail, *notes]))


def _conflict(problem: TypeProblem, seconds: float) -> Conflict:
    """An irreducible set of this type's requests that cannot be placed together.

    Three cases, cheapest proof first: a request with no admissible split is a conflict alone;
    if the requests want more cards than the nodes have free, the fewest largest requests that
    overflow the free cards are one (each is needed for the overflow); otherwise a deletion
    filter drops every request whose removal leaves the rest still infeasible.
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
    if sum(it.request.cards for it in problem.items) > total_free:
        picked: list[Item] = []
        for it in sorted(problem.items, key=lambda i: (-i.request.cards, i.index)):
            picked.append(it)
            if sum(p.request.cards for p in picked) > total_free:
                break
        picked.sort(key=lambda i: i.index)
        cards = sum(p.request.cards for p in picked)
        return Conflict(
            name,
            ConflictKind.OVERBOOKED,
            tuple(p.label for p in picked),
            f"together they need {cards} {name} cards, only {total_free} are free ({where})",
        )
    deadline = time.monotonic() + seconds
    core = [it.index for it in problem.items]
    undecided = False
    # try to drop the small requests first, so the conflict names the ones that crowd the nodes
    for idx in sorted(core, key=lambda i: (problem.items[i].request.cards, i)):
        trial = [i for i in core if i != idx]
        left = deadline - time.monotonic()
        verdict = _feasible(problem, trial, min(left, 2.0)) if left > 0 else None
        if verdict is False:
            core = trial
        elif verdict is None:
            undecided = True
    items = [problem.items[i] for i in core]
    cards = sum(it.request.cards for it in items)
    detail = (
        f"{', '.join(f'{it.label} ({it.request.cards})' for it in items)}: {cards} {name} cards "
        f"cannot be split and placed on {where}"
    )
    if undecided:
        detail += " (not proven minimal within the time budget)"
    return Conflict(name, ConflictKind.PACKING, tuple(it.label for it in items), detail)


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
    for it in problem.items:
        split = it.splits[out.choice[it.index]]
        devices = (out.devices or [{}] * len(problem.items))[it.index]
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
                devices=tuple(sorted((n, tuple(tuple(i) for i in lists)) for n, lists in named.items())),
                straddling=(out.straddling or [0] * len(problem.items))[it.index],
                zones=tuple(sorted(zones.items())),
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
    if placed is not None:
        ub = problem.upper_bound
        return Outcome(SolveStatus.OPTIMAL, best, placed, ub, ub), Method.FAST_PATH
    from planner.search.solver import solve

    return solve(
        problem, seconds=seconds, workers=workers, previous=previous, progress=progress
    ), Method.CP_SAT


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
        )
        if out.status is SolveStatus.INFEASIBLE:
            failed[i] = conflict(problem, seconds=min(CONFLICT_SECONDS, share))
            continue
        if out.choice is None or out.nodes is None:
            detail = "no plan found within the time budget (not proven impossible)"
            labels = tuple(it.label for it in problem.items)
            failed[i] = Conflict(problem.resource.name, ConflictKind.TIMEOUT, labels, detail)
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

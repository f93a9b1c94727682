"""Explain a plan to a person: per request, the split, where it lands, and why not a better one.

Notes
-----
"Why not a better split" is answered by evidence, not by guesses: a split the table does not admit
says which rule refused it; a split that cannot be placed at all says which count fell short;
anything else is checked by re-running the search with that split forced, which either proves it
cannot fit next to the other requests or shows the lower total it would lead to. These extra
searches are capped (``budget`` seconds in all) and said so when cut short.
"""

from __future__ import annotations

import time
from fractions import Fraction

from planner.base.codes import ConflictKind, SolveStatus
from planner.base.strategies import Topology
from planner.model.options import Item, Split, TypeProblem
from planner.model.result import Allocation, PlanResult, gap
from planner.model.spec import PlanSpec, ResourceKind


def _num(x: Fraction | None) -> str:
    if x is None:
        return "-"
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.4g}"


def _term(a: Allocation) -> Fraction:
    assert a.term is not None, "a planned allocation knows its term"
    return a.term


def _static_reason(problem: TypeProblem, item: Item, split: Split) -> str | None:
    """A reason from counting alone, when one exists."""
    g, k = split.units, split.instances
    fits = [f for _, f in problem.nodes if f >= g]
    if item.distinct and len(fits) < k:
        return f"needs {k} distinct nodes with ≥{g} free, only {len(fits)} have that"
    slots = sum(f // g for f in fits)
    if slots < k:
        return f"only {slots} instances of {g} fit in the free cards, {k} needed"
    return None


def _why_not(problem: TypeProblem, item: Item, s: int, total: Fraction, deadline: float) -> str:
    split = item.splits[s]
    static = _static_reason(problem, item, split)
    if static:
        return static
    left = deadline - time.monotonic()
    if left <= 0:
        return "not analysed (explanation time budget used up)"
    from planner.search.solver import solve  # OR-Tools only when a better split needs explaining

    out = solve(problem, seconds=min(left, 2.0), forced={item.index: s})
    if out.status is SolveStatus.INFEASIBLE:
        return "does not fit together with the other requests on these nodes"
    if out.score is not None and out.choice is not None:
        changed = [
            f"{it.label} {it.splits[c].text}"
            for it, c in zip(problem.items, out.choice, strict=True)
            if it is not item and c != 0
        ]
        tail = f" (it forces {', '.join(changed)})" if changed else ""
        return f"fits, but the best plan with it scores {_num(out.score)} < {_num(total)}{tail}"
    return "not decided within the explanation time budget"


def _free_text(free: list[int]) -> str:
    """Free units per node: each listed on a small cluster, grouped on a large one."""
    if len(free) <= 16:
        return ", ".join(map(str, sorted(free, reverse=True))) or "none"
    counts: dict[int, int] = {}
    for f in free:
        counts[f] = counts.get(f, 0) + 1
    return ", ".join(f"{f} (×{n})" if n > 1 else str(f) for f, n in sorted(counts.items(), reverse=True))


def _type_section(
    problem: TypeProblem, result: PlanResult, allocations: tuple[Allocation, ...], deadline: float
) -> list[str]:
    """One resource type's plan: its nodes, each request's split and nodes, and why not better."""
    name = problem.resource.name
    unit = "cards" if problem.resource.kind is ResourceKind.GPU else "cores"
    by_key = {(a.operator, a.resource): a for a in allocations}
    total = sum((_term(a) for a in allocations if a.resource == name), Fraction(0))
    free = [f for _, f in problem.nodes]
    st = next((s for s in result.stats if s.resource == name), None)
    how = f"; decided by {st.method} in {st.seconds:.2f}s" if st else ""
    if st and st.progress:
        how += f" ({st.progress})"
    lines = [
        "",
        f"{name}: {len(free)} usable nodes, {sum(free)} {unit} free (per node: {_free_text(free)}); "
        f"score {_num(total)} of at most {_num(problem.upper_bound)}{how}",
    ]
    if problem.note:
        lines.append(f"  note: {problem.note}")
    if problem.cpu_note:
        lines.append(f"  note: {problem.cpu_note}")
    for item in problem.items:
        a = by_key[item.request.operator, name]
        where = ", ".join(f"{n}×{c}" if c > 1 else n for n, c in a.nodes)
        lines.append(
            f"  {item.label:<24} {item.strategy.value:<8} {a.instances}×{a.units} "
            f"(term {_num(a.term)})  on {where}"
        )
        lines += _device_lines(problem, item, a, result.optimal)
        lines += [f"      {line}" for line in _why_not_lines(problem, item, a, total, deadline)]
    return lines


def _why_not_lines(
    problem: TypeProblem, item: Item, a: Allocation, total: Fraction, deadline: float
) -> list[str]:
    """Each split scoring more than the chosen one, and each split the table refused, with why not."""
    lines = []
    for s, sp in enumerate(item.splits):
        if sp.score > _term(a):
            lines.append(
                f"not {sp.text} (term {_num(sp.score)}): {_why_not(problem, item, s, total, deadline)}"
            )
    for k, g, why in item.rejected:
        lines.append(f"not {k}×{g}: not admissible, {why}")
    return lines


def why_not(result: PlanResult, budget: float = 10.0) -> dict[tuple[str, str], tuple[str, ...]]:
    """Per request (operator, resource): which of its instances straddle domains and why, and why
    it did not get a better split, as :func:`explain` says it (the page of
    :mod:`planner.output.view` shows these beside each request's split)."""
    deadline = time.monotonic() + budget
    allocations = result.allocations if result.feasible else result.partial
    by_key = {(a.operator, a.resource): a for a in allocations}
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for problem in result.problems:
        name = problem.resource.name
        total = sum((_term(a) for a in allocations if a.resource == name), Fraction(0))
        for item in problem.items:
            a = by_key.get((item.request.operator, name))
            if a is not None and a.term is not None:
                straddles = [
                    line.strip()
                    for line in _device_lines(problem, item, a, result.optimal)
                    if "straddles" in line
                ]
                out[item.request.operator, name] = (
                    *straddles,
                    *_why_not_lines(problem, item, a, total, deadline),
                )
    return out


def _straddle_why(problem: TypeProblem, item: Item, a: Allocation, proven: bool) -> str:
    if item.topology is Topology.NONE:
        return "topology: none"
    widest = max((d.total for doms in problem.domains.values() for d in doms), default=0)
    room = max((len(d.free) for doms in problem.domains.values() for d in doms), default=0)
    if widest < a.units:
        return f"no domain of any node has {a.units} GPUs (the largest has {widest})"
    if room < a.units:
        return f"no domain of any node has {a.units} free GPUs (the most is {room})"
    why = "inside one domain the plan would score less, or straddle more instances"
    return why + (" (proven)" if proven else " (best found in time)")


def _device_lines(problem: TypeProblem, item: Item, a: Allocation, proven: bool) -> list[str]:
    """Which GPUs (or NUMA zones) each instance holds, and why one had to straddle domains."""
    lines = []
    domain = {(n, dev): d.name for n, doms in problem.domains.items() for d in doms for dev in d.free}
    for node, lists in a.devices:
        for devs in lists:
            names = sorted({domain.get((node, dev), "?") for dev in devs})
            where = f"{node}: {', '.join(devs)} ({' + '.join(n or 'one domain' for n in names)})"
            if len(names) < 2:
                lines.append(f"      devices {where}")
            else:
                why = _straddle_why(problem, item, a, proven)
                lines.append(f"      devices {where}: straddles domains: {why}")
    single = {n for n, h in problem.hosts.items() if h.single_numa} if a.zones else set()
    for node, instances in a.zones:
        counts: dict[str, int] = {}
        for zones in instances:
            if len(zones) == 1:
                counts[zones[0][0]] = counts.get(zones[0][0], 0) + 1
        if counts:
            text = ", ".join(f"{z} ×{c}" if c > 1 else z for z, c in counts.items())
            lines.append(f"      NUMA zone {node}: {text}")
        for zones in instances:
            if len(zones) > 1:
                why = _straddle_why(problem, item, a, proven)
                refused = (
                    f"; {node}'s kubelet runs single-numa-node and refuses such a pod"
                    if node in single
                    else ""
                )
                parts = " + ".join(f"{c} in {name}" for name, c in zones)
                lines.append(f"      NUMA zones {node}: {parts}: straddles zones: {why}{refused}")
    return lines


def _conflict_lines(result: PlanResult) -> list[str]:
    lines = []
    for c in result.conflicts:
        if c.kind is ConflictKind.TIMEOUT:
            lines.append(f"  {c.resource}: {c.detail}; a longer --time-limit may find one")
            continue
        lines.append(f"  {c.resource}: these requests cannot be placed together: {', '.join(c.operators)}")
        lines.append(f"    {c.detail}")
        if c.minimal:
            lines.append("    dropping or shrinking any one of them makes the rest fit")
        else:
            lines.append("    not shown minimal: a smaller set of them may not fit either")
    if result.reason and not result.conflicts:
        lines.append(f"  {result.reason}")
    return lines


def _gap_text(result: PlanResult) -> str:
    """A plan cut short by the time limit: the best found, the bound, and how far apart."""
    text = f"best found, bound {_num(result.bound)}"
    g = gap(result.score, result.bound)
    return text + (f", gap {float(g) * 100:.2f}%" if g is not None else "")


def explain(spec: PlanSpec, result: PlanResult, budget: float = 10.0) -> str:
    head = f"Plan {spec.namespace}/{spec.name} (scoring {spec.scoring}): "
    deadline = time.monotonic() + budget
    if not result.feasible:
        lines = [head + "NO DEPLOYABLE PLAN", *_conflict_lines(result)]
        planned = {a.resource for a in result.partial}
        if planned:
            lines += ["", "The other types have a plan (nothing is applied while any type has none):"]
            for problem in result.problems:
                if problem.resource.name in planned:
                    lines += _type_section(problem, result, result.partial, deadline)
        if result.warnings:
            lines += ["", *(f"warning: {w}" for w in result.warnings)]
        return "\n".join(lines) + "\n"
    status = "optimal (proven)" if result.optimal else _gap_text(result)
    lines = [head + f"score {_num(result.score)}, {status}"]
    lines.append(f"cards placed {result.cards_placed}/{result.cards_requested}")
    if result.moved is not None:
        lines.append(f"moved {result.moved} instance(s) from the previous plan")
    for problem in result.problems:
        lines += _type_section(problem, result, result.allocations, deadline)
    if result.warnings:
        lines += ["", *(f"warning: {w}" for w in result.warnings)]
    return "\n".join(lines) + "\n"

"""Several plans' answers for a person (``-o text``) and as one set of objects (``-o manifests``).

Notes
-----
Each plan reads as it does alone (:func:`planner.explain`), after a line that says whether it
was admitted and, if not, who holds the cards it needs; each elastic request says what it got of
its range and why not more. On a live cluster the cluster's other plans, planned together with
the files', close the text with one line each, so a plan that would preempt another says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner import Shared


def _cards(answer: Shared) -> str:
    placed = answer.result.cards_placed if answer.admitted else 0
    return f"{placed}/{answer.cards_max} cards"


def headline(answer: Shared) -> str:
    """``team/fence (priority 5): admitted, 12/16 cards`` or why it was not."""
    head = f"{answer.name} (priority {answer.spec.priority})"
    if answer.admitted and answer.result.feasible:
        return f"{head}: admitted, {_cards(answer)}"
    why = (answer.result.reason or "").removeprefix(f"{answer.reason.value}: ")
    return f"{head}: not admitted ({answer.reason.value}){': ' + why if why else ''}"


def text(mine: Sequence[Shared], others: Sequence[Shared] = ()) -> str:
    from planner import explain

    alone = len(mine) == 1 and not others and not mine[0].grants and not mine[0].kept
    if alone and mine[0].reason.value in ("Admitted", "NoRoom"):  # one plan reads as it always has
        return explain(mine[0].spec, mine[0].result)
    parts = []
    for answer in mine:
        lines = [headline(answer)]
        lines += [f"  elastic: {g.text}" for g in answer.grants]
        for a in answer.kept:
            nodes = ", ".join(f"{n}×{k}" for n, k in a.nodes)
            lines.append(f"  keeps {a.operator} {a.resource}: {a.instances}×{a.units} on {nodes}")
        body = explain(answer.spec, answer.result) if answer.admitted else ""
        parts.append("\n".join(lines) + "\n" + body)
    if others:
        lines = ["The cluster's other plans, planned together with these:"]
        lines += [f"  {headline(o)}" for o in others]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def manifests(answers: Sequence[Shared], priority_base: int) -> list[dict[str, Any]]:
    """Every object the operator would write for these plans: one patch per node (every plan's
    labels), each PriorityClass once, then each plan's ConfigMaps, claim templates, Deployments."""
    from planner import render_desired

    labels: dict[str, dict[str, str]] = {}
    classes: dict[str, dict[str, Any]] = {}
    rest: list[dict[str, Any]] = []
    for a in answers:
        desired = render_desired(a.spec, a.result, priority_base)
        for node, more in desired.node_labels.items():
            labels.setdefault(node, {}).update(more)
        for pc in desired.priority_classes:
            classes.setdefault(pc["metadata"]["name"], pc)
        rest += [*desired.configmaps, *desired.claim_templates, *desired.deployments]
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels[n]}} for n in labels
    ]
    return [*nodes, *sorted(classes.values(), key=lambda pc: -int(pc["value"])), *rest]

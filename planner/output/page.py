"""The plan's picture as one self-contained HTML page (Jinja2; the template ships with the package).

Notes
-----
The page must open from a file, on a machine with no network, and from the operator's metrics
port behind a port-forward: so no outside fonts, scripts or style sheets, only inline CSS and a
little inline JavaScript. It must also open fast at 5,000 nodes: a group of identical nodes is
drawn once, and its nodes are kept as JSON (name, instance ids, devices) that a short script turns
into rows, copies of the drawn one, when the reader opens the group. Off-screen chunks of rows
are neither laid out nor painted (``content-visibility``) until scrolled to. The only input is a
:class:`~planner.output.view.View`; reading the template from the installed package is the one
I/O here.
"""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from planner.output.view import Group, Part, Row, View

TEMPLATE = "plan.html.j2"


def _domains(row: Row) -> list[tuple[str | None, list[Part]]]:
    """A row's parts in runs of one domain (devices known one by one), or one run."""
    runs: list[tuple[str | None, list[Part]]] = []
    for part in row.parts:
        if runs and runs[-1][0] == part.domain:
            runs[-1][1].append(part)
        else:
            runs.append((part.domain, [part]))
    return runs


def _members(group: Group) -> list[tuple[str, list[str], list[str]]]:
    """Each node of a group: its name, its instance ids and (devices known one by one) its device
    names, in the order of the group's drawn row (identical rows: the parts line up)."""
    return [
        (
            row.node,
            [p.instance for p in row.parts if p.kind == "instance"],
            [p.device for p in row.parts if p.device],
        )
        for row in group.rows
    ]


def _hue(colour: int) -> str:
    """Distinct colours for neighbouring legend entries (golden-angle hues, three lightnesses)."""
    return f"hsl({colour * 137.508 % 360:.1f} 62% {40 + colour % 3 * 11}%)"


@cache
def _bars(cards: int) -> Markup:
    """``cards`` card cells (one element each, so the page can be checked card by card)."""
    return Markup("<b></b>" * cards)


@cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("planner.output", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(domains=_domains, hue=_hue, bars=_bars, members=_members)
    return env


def render_page(view: View, generated: str = "") -> str:
    """The page for ``view``; ``generated`` says when (and from what) it was made."""
    return _environment().get_template(TEMPLATE).render(view=view, generated=generated)

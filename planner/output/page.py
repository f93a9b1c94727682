"""The plan's picture as one self-contained HTML page (Jinja2; the template ships with the package).

Notes
-----
The page must open from a file, on a machine with no network, and from the operator's metrics
port behind a port-forward: so no outside fonts, scripts or style sheets, only inline CSS and a
little inline JavaScript. It must also open fast at 5,000 nodes: a group of identical nodes is
drawn once and its member rows sit in an inert ``<template>`` (parsed, never laid out) until the
reader opens the group. The only input is a :class:`~planner.output.view.View`; reading the
template from the installed package is the one I/O here.
"""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from planner.output.view import Part, Row, View

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
    env.globals.update(domains=_domains, hue=_hue, bars=_bars)
    return env


def render_page(view: View, generated: str = "") -> str:
    """The page for ``view``; ``generated`` says when (and from what) it was made."""
    return _environment().get_template(TEMPLATE).render(view=view, generated=generated)

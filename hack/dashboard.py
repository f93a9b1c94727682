"""The operator's Grafana dashboard, generated: ``python hack/dashboard.py`` writes it into the chart.

Notes
-----
The dashboard is code (grafanalib), not hand-edited JSON: every panel's query is listed once in
:data:`PANELS`, which the end-to-end test also runs against a real Prometheus scraping the
operator. ``--check`` (run by ``make lint``) fails when the chart's JSON is not what this
script writes, so the two never drift. The chart ships it as a ConfigMap the Grafana sidecar
picks up (``dashboard.enabled``, off by default).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard, GridPos, Target, Templating, TimeSeries
from grafanalib.core import Template as Variable

OUT = Path(__file__).resolve().parent.parent / "charts" / "gpuplan-operator" / "dashboards" / "gpuplan.json"
DATASOURCE = "${datasource}"

# (title, unit, [(PromQL, legend)])
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Cards placed per plan",
        "none",
        [('gpuplan_plan_cards{bound="placed"}', "{{namespace}}/{{plan}} (priority {{priority}})")],
    ),
    (
        "Cards min and max per plan",
        "none",
        [('gpuplan_plan_cards{bound=~"min|max"}', "{{namespace}}/{{plan}} {{bound}}")],
    ),
    ("Plans by phase", "none", [("gpuplan_plans", "{{phase}}")]),
    (
        "Cycle duration by stage (mean)",
        "s",
        [
            (
                "sum by (stage) (gpuplan_cycle_seconds_sum) / sum by (stage) (gpuplan_cycle_seconds_count)",
                "{{stage}}",
            )
        ],
    ),
    (
        "Cycle time and the operator's CPU meanwhile (mean per cycle)",
        "s",
        [
            ('gpuplan_cycle_seconds_sum{stage="total"} / gpuplan_cycle_seconds_count{stage="total"}', "time"),
            ("gpuplan_cycle_cpu_seconds_total / gpuplan_cycles_total", "CPU"),
        ],
    ),
    ("Cycles per minute", "none", [("60 * rate(gpuplan_cycles_total[5m])", "cycles")]),
    (
        "Plans planned per cycle (mean)",
        "none",
        [("gpuplan_cycle_plans_planned_sum / gpuplan_cycle_plans_planned_count", "plans")],
    ),
    (
        "Preemptions, shrinks and grows",
        "none",
        [("sum by (reason) (gpuplan_share_events_total)", "{{reason}}")],
    ),
    ("Objects in the watched caches", "none", [("gpuplan_cache_objects", "{{kind}}")]),
    ("Pods held by the gang gate", "none", [("gpuplan_gated_pods", "gated pods")]),
    (
        "Gang releases by reason",
        "none",
        [("sum by (reason) (gpuplan_gang_releases_total)", "{{reason}}")],
    ),
    (
        "Gang wait, creation to release (mean)",
        "s",
        [("gpuplan_gang_wait_seconds_sum / gpuplan_gang_wait_seconds_count", "wait")],
    ),
    ("Writes per second by kind", "ops", [("sum by (kind) (rate(gpuplan_writes_total[5m]))", "{{kind}}")]),
]


def queries() -> list[str]:
    """Every panel's PromQL, in panel order (what the end-to-end test checks)."""
    return [expr for _, _, targets in PANELS for expr, _ in targets]


def dashboard() -> Dashboard:
    panels = []
    for i, (title, unit, targets) in enumerate(PANELS):
        panels.append(
            TimeSeries(
                title=title,
                dataSource=DATASOURCE,
                unit=unit,
                targets=[
                    Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + j), datasource=DATASOURCE)
                    for j, (expr, legend) in enumerate(targets)
                ],
                gridPos=GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2)),
            )
        )
    return Dashboard(
        title="gpuplan operator",
        uid="gpuplan-operator",
        description=(
            "Cards per plan and priority, the scheduling cycle, preemptions, elastic changes"
            " and gang releases."
        ),
        tags=["gpuplan"],
        timezone="utc",
        panels=panels,
        templating=Templating(
            list=[Variable(name="datasource", label="Data source", query="prometheus", type="datasource")]
        ),
    ).auto_panel_ids()


def render() -> str:
    return json.dumps(dashboard().to_json_data(), cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--check", action="store_true", help="fail when the chart's dashboard differs")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(
                f"{OUT.relative_to(OUT.parents[3])} is stale: run python hack/dashboard.py", file=sys.stderr
            )
            return 1
        print("dashboard: the chart's JSON is what hack/dashboard.py writes", file=sys.stderr)
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

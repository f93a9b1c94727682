"""``gpuplan loadtest merge``: the shards of one load test, combined into one result, exactly.

Each pod of an Indexed Job (or each of several ``--shard I/N`` runs on one machine) sends its
shard of every step and writes a JSON result whose steps carry their mergeable record (counts,
encoded HdrHistograms, the backlog on the shared grid). Merging adds those records step by step
(:func:`loadtest.record.merge`) and judges each merged step with the held rule the shards ran
with - so the merged verdict is the verdict on the whole rate, with the p99 of every request.

It refuses what would not be the same load test: different targets, different steps or windows,
different held rules, a shard twice, or a missing shard (unless ``partial``: then the rate judged
is the part the present shards sent, and the result says so).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadtest.arrivals import Shard
from loadtest.record import RecordError, coverage, from_dict, judge, merge, timeline_rows
from loadtest.report import RESULT_KIND, build_result
from loadtest.runner import RunConfig
from loadtest.search import SearchConfig, SearchResult, knee_owner
from loadtest.stats import HeldRule


class MergeError(ValueError):
    """The results cannot be merged; the message names the file and the field."""


def load_result(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise MergeError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise MergeError(f"{path}: not a JSON loadtest result ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != RESULT_KIND:
        raise MergeError(f"{path}: not a loadtest result (kind is not {RESULT_KIND})")
    return doc


def _configs(doc: Mapping[str, Any], path: str) -> tuple[RunConfig, SearchConfig]:
    try:
        run = dict(doc["run"])
        run["rule"] = HeldRule(**run["rule"])
        search = dict(doc["search"])
        search["rates"] = tuple(search.get("rates", ()))
        return RunConfig(**run), SearchConfig(**search)
    except (KeyError, TypeError, ValueError) as exc:
        raise MergeError(f"{path}: run or search settings unreadable ({exc})") from None


def merge_results(docs: Sequence[tuple[str, Mapping[str, Any]]], *, partial: bool = False) -> dict[str, Any]:
    """One result document from the shards' documents (``(path, doc)`` pairs)."""
    if not docs:
        raise MergeError("nothing to merge")
    first_path, first = docs[0]
    run_cfg, search_cfg = _configs(first, first_path)
    counts = set()
    seen: dict[int, str] = {}
    for path, doc in docs:
        if doc.get("target") != first.get("target"):
            raise MergeError(f"{path}: target {doc.get('target')!r} is not {first.get('target')!r}")
        if doc.get("run", {}).get("rule") != first.get("run", {}).get("rule"):
            raise MergeError(f"{path}: run.rule differs from {first_path}'s: not the same held rule")
        shard = doc.get("shard") or {"index": 0, "count": 1}
        counts.add(int(shard.get("count", 1)))
        index = int(shard.get("index", 0))
        if index in seen:
            raise MergeError(f"{path}: shard.index {index} is also {seen[index]}'s")
        seen[index] = path
        if len(doc.get("steps", [])) != len(first.get("steps", [])):
            raise MergeError(
                f"{path}: {len(doc.get('steps', []))} steps, {first_path} has {len(first.get('steps', []))}"
            )
    if len(counts) != 1:
        raise MergeError(f"the results disagree on shard.count: {sorted(counts)}")
    n = counts.pop()
    missing = sorted(set(range(n)) - set(seen))
    notes: list[str] = []
    if missing:
        if not partial:
            raise MergeError(f"shard(s) {missing} of {n} missing (pass --partial to merge what is there)")
        notes.append(f"shards {missing} of {n} are missing: the steps judge only the present shards' rate")

    search = SearchResult(stopped="merged")
    records = []
    for i in range(len(first.get("steps", []))):
        try:
            parts = [from_dict(doc["steps"][i]["record"]) for _, doc in docs]
            merged = merge(parts)
        except (RecordError, KeyError, TypeError) as exc:
            raise MergeError(f"step {i}: {exc}") from None
        cpus = [doc["steps"][i].get("server_cpu_cores") for _, doc in docs]
        cpus = [c for c in cpus if isinstance(c, int | float)]
        step = judge(merged, index=i, rule=run_cfg.rule, server_cpu_cores=max(cpus) if cpus else None)
        records.append(merged)
        search.steps.append(step)
        if step.held and step.rate > (search.capacity_qps or 0.0):
            search.capacity_qps = step.rate
        if not step.held and (search.failed_qps is None or step.rate < search.failed_qps):
            search.failed_qps = step.rate
        if abs(coverage(merged.shards) - 1.0) > 1e-9 and not missing:
            raise MergeError(f"step {i}: the shards cover {coverage(merged.shards):.3f} of the schedule")
    search.limited_by, search.limited_because = knee_owner(search.steps, search.capacity_qps)
    started = min(str(doc.get("started", "")) for _, doc in docs)
    return build_result(
        target=str(first.get("target")),
        task=str(first.get("task")),
        search_config=search_cfg,
        run_config=run_cfg,
        search=search,
        timeline=timeline_rows(records),
        started=dt.datetime.fromisoformat(started) if started else dt.datetime.now(dt.UTC),
        duration_s=max(float(doc.get("duration_s", 0.0)) for _, doc in docs),
        instances=first.get("instances"),
        extra_notes=notes,
        shard=Shard(),
        headers=first.get("headers") or {},
        merged_from=[p for p, _ in docs],
    )

"""One whole run as a function: senders, runner, search, result document.

The command line and the tests both call :func:`run_load_test`, so what a test measures is what a
user gets. Partial results survive an interruption: the caller may pass its own
:class:`~loadtest.search.SearchResult` and still read the finished steps after Ctrl-C.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loadtest.arrivals import Shard
from loadtest.messages import Task
from loadtest.probe import ServerProbe
from loadtest.progress import Progress
from loadtest.record import timeline_rows
from loadtest.report import build_result
from loadtest.runner import RunConfig, Runner
from loadtest.search import SearchConfig, SearchResult, search_capacity
from loadtest.senders import LocalSender, ProcessSenders, SenderSpec
from loadtest.transport import make_transport


@dataclass
class Session:
    """What a run produced so far; ``result()`` renders it as the JSON document."""

    url: str
    task_name: str
    run_config: RunConfig
    search_config: SearchConfig
    task_args: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    instances: int | None = None
    probe: ServerProbe | None = None
    shard: Shard = field(default_factory=Shard)
    start_at: float | None = None  # wall clock (epoch seconds) of the first step, for shards
    loop: str = "auto"
    notes: list[str] = field(default_factory=list)
    search: SearchResult = field(default_factory=SearchResult)
    runner: Runner | None = None
    sender_pids: list[int] = field(default_factory=list)
    sender_peak_rss_mib: float | None = None
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    _t0: float = field(default_factory=time.monotonic)
    _t_end: float | None = None

    def spec(self) -> SenderSpec:
        return SenderSpec(
            url=self.url,
            task=self.task_name,
            task_args=dict(self.task_args),
            timeout=self.run_config.timeout,
            headers=dict(self.headers),
            loop=self.loop,
        )

    def result(self) -> dict[str, Any]:
        notes: list[str] = list(self.notes)
        runner = self.runner
        if runner is not None and runner.late_starts:
            notes.append(
                f"{runner.late_starts} steps started late (after their --start-at slot): "
                "they do not line up with the other shards' steps"
            )
        end = self._t_end if self._t_end is not None else time.monotonic()
        return build_result(
            target=self.url,
            task=self.task_name,
            search_config=self.search_config,
            run_config=self.run_config,
            search=self.search,
            timeline=timeline_rows(runner.records, runner.server_cpu) if runner is not None else [],
            started=self.started,
            duration_s=end - self._t0,
            instances=self.instances,
            server_pids=self.probe.pids if self.probe is not None else (),
            server_stats=getattr(self.probe, "urls", ()),
            extra_notes=notes,
            shard=self.shard,
            start_at=self.start_at,
            headers=self.headers,
            senders={
                "processes": self.run_config.processes,
                "pids": list(self.sender_pids),
                "peak_rss_mib": None
                if self.sender_peak_rss_mib is None
                else round(self.sender_peak_rss_mib, 1),
            },
        )


def _round1(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


async def run_load_test(
    session: Session,
    task: Task | None = None,
    *,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the search described by ``session`` against its URL; returns the result document.

    ``task`` (an object) is only for ``processes=0``; sender processes build the task from its
    name. Raises ``ValueError`` for a URL no transport can serve, and
    :class:`~loadtest.senders.SenderError` when the senders cannot start (both before any load).
    """
    cfg = session.run_config
    spec = session.spec()
    health = make_transport(session.url, timeout=cfg.timeout, headers=session.headers)
    senders: ProcessSenders | LocalSender
    if cfg.processes == 0:
        senders = LocalSender(spec, concurrency=cfg.concurrency, task=task)
    else:
        if task is not None:
            raise ValueError("a task object needs processes=0; sender processes load tasks by name")
        senders = ProcessSenders(spec, processes=cfg.processes, concurrency=cfg.concurrency)
    start_at = None
    if session.start_at is not None:
        start_at = time.monotonic() + (session.start_at - time.time())
    try:
        await senders.start()
        session.sender_pids = list(senders.pids)
        runner = Runner(
            senders,
            cfg,
            url=session.url,
            health=health,
            probe=session.probe,
            progress=progress,
            shard=session.shard,
            start_at=start_at,
        )
        session.runner = runner
        await search_capacity(
            runner.run_step,
            session.search_config,
            step_seconds=cfg.step_seconds + (runner.period - cfg.step_seconds if start_at else 0.0),
            aborted=lambda: runner.abort_reason,
            result=session.search,
        )
    finally:
        session._t_end = time.monotonic()
        await senders.close()
        session.sender_peak_rss_mib = senders.peak_rss_mib
        await health.aclose()
    return session.result()

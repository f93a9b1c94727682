"""One whole run as a function: transport, runner, search, result document.

The command line and the tests both call :func:`run_load_test`, so what a test measures is what a
user gets. Partial results survive an interruption: the caller may pass its own
:class:`~loadtest.search.SearchResult` and still read the finished steps after Ctrl-C.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from loadtest.plugins import Task
from loadtest.probe import ProcessProbe
from loadtest.progress import Progress
from loadtest.report import build_result
from loadtest.runner import RunConfig, Runner
from loadtest.search import SearchConfig, SearchResult, search_capacity
from loadtest.transport import make_transport


@dataclass
class Session:
    """What a run produced so far; ``result()`` renders it as the JSON document."""

    url: str
    task_name: str
    run_config: RunConfig
    search_config: SearchConfig
    instances: int | None = None
    probe: ProcessProbe | None = None
    notes: list[str] = field(default_factory=list)
    search: SearchResult = field(default_factory=SearchResult)
    runner: Runner | None = None
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    _t0: float = field(default_factory=time.monotonic)
    _t_end: float | None = None

    def result(self) -> dict[str, Any]:
        notes: list[str] = list(self.notes)
        if self.runner is not None and self.runner.task_errors:
            notes.append(f"the task raised: {self.runner.task_errors[0]}")
        end = self._t_end if self._t_end is not None else time.monotonic()
        return build_result(
            target=self.url,
            task=self.task_name,
            search_config=self.search_config,
            run_config=self.run_config,
            search=self.search,
            timeline=self.runner.timeline.rows() if self.runner is not None else [],
            started=self.started,
            duration_s=end - self._t0,
            instances=self.instances,
            server_pids=self.probe.pids if self.probe is not None else (),
            extra_notes=notes,
        )


async def run_load_test(
    session: Session,
    task: Task,
    *,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the search described by ``session`` against its URL; returns the result document.

    Raises ``ValueError`` for a URL no transport can serve (before any load is sent).
    """
    transport = make_transport(
        session.url,
        concurrency=session.run_config.concurrency,
        timeout=session.run_config.timeout,
    )
    try:
        runner = Runner(transport, task, session.run_config, probe=session.probe, progress=progress)
        session.runner = runner
        await search_capacity(
            runner.run_step,
            session.search_config,
            step_seconds=session.run_config.step_seconds,
            aborted=lambda: runner.abort_reason,
            result=session.search,
        )
    finally:
        session._t_end = time.monotonic()
        await transport.aclose()
    return session.result()

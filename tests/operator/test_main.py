"""__main__.py: command-line defaults and the log filter."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from gpuplan_operator.__main__ import (
    FAULT_ENV,
    METRICS_PORT_ENV,
    ExitAfterWrites,
    _fault_injection,
    _quiet_node_events,
    metrics_port,
    parser,
)


def test_defaults_are_standalone_clusterwide_with_liveness() -> None:
    args = parser().parse_args([])
    assert args.peering is None and args.namespace == []
    assert args.liveness == "http://0.0.0.0:8080/healthz"


def test_namespaces_and_peering() -> None:
    args = parser().parse_args(["-n", "a", "-n", "b", "--peering", "gpuplan", "--priority", "5"])
    assert args.namespace == ["a", "b"] and args.peering == "gpuplan" and args.priority == 5


def test_node_event_successes_are_dropped_but_failures_kept() -> None:
    def record(level: int, msg: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", level, __file__, 1, msg, None, None)

    assert not _quiet_node_events(record(logging.INFO, "Handler 'node_event' succeeded."))
    assert not _quiet_node_events(record(logging.INFO, "Handler 'topology_event' succeeded."))
    assert _quiet_node_events(record(logging.ERROR, "Handler 'node_event' failed with an exception."))
    assert _quiet_node_events(record(logging.INFO, "Handler 'plan_created' succeeded."))


def test_no_fault_hook_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULT_ENV, raising=False)
    assert _fault_injection() is None
    monkeypatch.setenv(FAULT_ENV, "3")
    hook = _fault_injection()
    assert isinstance(hook, ExitAfterWrites) and hook.limit == 3


def test_metrics_are_off_by_default_and_bind_all_addresses_when_on() -> None:
    args = parser().parse_args([])
    assert args.metrics_port is None and args.metrics_address == "0.0.0.0"
    assert metrics_port(args.metrics_port, {}) == 0


@pytest.mark.parametrize(
    ("flag", "env", "port"),
    [
        (None, {METRICS_PORT_ENV: "8000"}, 8000),
        (None, {METRICS_PORT_ENV: ""}, 0),
        (None, {METRICS_PORT_ENV: "0"}, 0),
        (9100, {METRICS_PORT_ENV: "8000"}, 9100),
        (0, {METRICS_PORT_ENV: "8000"}, 0),
    ],
    ids=["env", "empty env is off", "env 0 is off", "the flag wins", "flag 0 turns it off"],
)
def test_metrics_port_flag_wins_over_env(flag: int | None, env: dict[str, str], port: int) -> None:
    assert metrics_port(flag, env) == port


@pytest.mark.parametrize("env", ["eighty", "70000", "-1"])
def test_a_bad_metrics_port_is_refused(env: str) -> None:
    with pytest.raises(ValueError, match="port"):
        metrics_port(None, {METRICS_PORT_ENV: env})


def _unreachable_kubeconfig(path: Path) -> Path:
    """A kubeconfig whose API server refuses connections: the operator logs its retries."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    return path


@pytest.mark.parametrize(
    ("fmt", "is_json"),
    [pytest.param("json", True, id="json writes one JSON object a line"),
     pytest.param("text", False, id="text is kopf's plain format")],
)  # fmt: skip
def test_log_format_of_the_running_operator(tmp_path: Path, fmt: str, is_json: bool) -> None:
    """The real process, briefly: every line it logs has the chosen format."""
    env = dict(os.environ, KUBECONFIG=str(_unreachable_kubeconfig(tmp_path / "kubeconfig")))
    env.pop("GPUPLAN_METRICS_PORT", None)
    env["PYTHONUNBUFFERED"] = "1"
    cmd = [sys.executable, "-m", "gpuplan_operator", "--liveness", "none", "--log-format", fmt]
    out: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    deadline = time.monotonic() + 60  # a loaded machine starts it slowly
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:

        def read() -> None:
            for line in proc.stdout or ():
                out.put(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            # until it has got as far as calling the API (it then retries forever)
            while not any("127.0.0.1:1" in line for line in seen) and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    seen.append(out.get(timeout=1))
        finally:
            proc.kill()
            reader.join(20)  # it ends at the pipe's end, before the pipe is closed
    lines = [line for line in seen if line.strip()]
    assert any("127.0.0.1:1" in line for line in lines), "".join(seen)
    for line in lines:
        if is_json:
            record = json.loads(line)
            assert {"message", "severity", "timestamp"} <= record.keys(), line
        else:
            assert line.startswith("[") and not line.startswith("{"), line


def test_an_unknown_log_format_is_refused_naming_the_flag() -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--log-format", "xml"])
    assert exited.value.code == 2

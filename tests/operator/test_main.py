"""__main__.py: command-line defaults and the log filter."""

from __future__ import annotations

import logging

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

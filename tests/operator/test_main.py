"""__main__.py: command-line defaults and the log filter."""

from __future__ import annotations

import logging

import pytest
from gpuplan_operator.__main__ import FAULT_ENV, _fault_hook, _quiet_node_events, parser


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
    assert _fault_hook() is None
    monkeypatch.setenv(FAULT_ENV, "3")
    assert callable(_fault_hook())

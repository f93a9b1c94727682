"""Fixtures of the fault suite (``make chaos``): the e2e fixtures, with the operator behind a proxy.

Notes
-----
- Everything of ``e2e/conftest.py`` applies (the cluster from ``$KUBECONFIG``, the CRD, one
  namespace per test, fresh fake nodes, logs on failure). What changes: the session's operator
  talks to the API server through :class:`~e2e.chaos.support.FaultProxy`, runs with the
  documented defaults (not the e2e suite's short timings) and serves its metrics.
- If the regular e2e session's operator was started in the same pytest run, it is stopped for
  the fault suite: two operators acting on the same plans would prove nothing.
- The figures each test measures go to ``e2e/.logs/chaos-figures.json``, printed at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from e2e.chaos.support import FIGURES, ChaosOperator, ControlPlane, FaultProxy, cluster_state_dir
from e2e.support import REPO, OperatorProcess

LOGS = REPO / "e2e" / ".logs"
LISTENERS = ("operator", "peer-low", "peer-high")


def pytest_sessionstart(session: pytest.Session) -> None:
    FIGURES.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES.exists():
        terminalreporter.write_sep("=", "chaos figures")
        terminalreporter.write_line(json.dumps(json.loads(FIGURES.read_text()), indent=2, sort_keys=True))


@pytest.fixture(scope="session")
def proxy(kubeconfig: str) -> Iterator[FaultProxy]:
    LOGS.mkdir(exist_ok=True)
    fault_proxy = FaultProxy(kubeconfig, LOGS, LISTENERS)
    fault_proxy.log_path.unlink(missing_ok=True)
    fault_proxy.start()
    yield fault_proxy
    fault_proxy.stop()


@pytest.fixture(scope="session")
def operator_process(
    operator_process: OperatorProcess, proxy: FaultProxy, crd: None
) -> Iterator[OperatorProcess]:
    """The session's operator, behind the proxy (the e2e suite's own one stopped meanwhile)."""
    operator_process.stop()
    proc = ChaosOperator(proxy.kubeconfig_for("operator"), LOGS, "chaos-operator")
    proc.log_path.unlink(missing_ok=True)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def chaos_operator(operator: OperatorProcess, proxy: FaultProxy) -> Iterator[ChaosOperator]:
    """The running chaos operator; faults are cleared after each test whatever happened."""
    assert isinstance(operator, ChaosOperator)
    yield operator
    proxy.clear()


@pytest.fixture(scope="session")
def control_plane(kubeconfig: str) -> ControlPlane:
    state = cluster_state_dir()
    if not (state / "pids").is_dir():
        pytest.fail(f"the fault suite needs the local control plane (bash hack/cluster-up.sh): no {state}")
    return ControlPlane(state)

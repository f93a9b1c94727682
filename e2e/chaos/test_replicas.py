"""5. Two replicas with peering: exactly one acts; kill it and the other takes over within the
documented 20 s (``PEERING_LIFETIME``), with no double writes.

Each replica talks to the API server through a port of the proxy of its own, so every write is
counted per replica, with its time. Peering's own writes (each replica renewing its record) and
Events are not acting on plans; everything else is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gpuplan_operator.handlers import PEERING_LIFETIME

from e2e.chaos.support import ChaosOperator, FaultProxy, Figures, converged
from e2e.support import (
    REPO,
    Api,
    Kubectl,
    OperatorProcess,
    one_type,
    operator_entry,
    plan_manifest,
    wait_for,
)

PEERING = "gpuplan-chaos"
NOT_ACTING = ("clusterkopfpeerings", "kopfpeerings", "events")
SLACK_S = 5.0  # one renewal's round trip and the takeover's first requests, on a loaded machine


@pytest.fixture
def replicas(
    kubectl: Kubectl, operator: OperatorProcess, proxy: FaultProxy
) -> Iterator[tuple[ChaosOperator, ChaosOperator]]:
    """The session's operator stopped; two peering replicas, each behind a proxy port of its own."""
    kubectl.run("apply", "--server-side", "-f", str(REPO / "crds" / "kopf-peering.yaml"))
    kubectl.run("wait", "--for=condition=Established", "--timeout=60s", "crd/clusterkopfpeerings.kopf.dev")
    kubectl.apply({"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING}})
    operator.stop()
    low, high = (
        ChaosOperator(
            proxy.kubeconfig_for(name),
            operator.log_dir,
            f"chaos-{name}",
            ["--peering", PEERING, "--priority", prio],
        )
        for name, prio in (("peer-low", "10"), ("peer-high", "20"))
    )
    for replica in (low, high):
        replica.log_path.unlink(missing_ok=True)
    try:
        low.start()
        high.start()
        wait_for(
            "the low-priority replica to pause", lambda: "Pausing operations" in low.log_since(0), timeout=60
        )
        yield low, high
    finally:
        low.stop()
        high.kill()
        kubectl.run("delete", "clusterkopfpeering", PEERING, "--ignore-not-found")
        operator.start()


def acting(log: list[list[Any]], listener: str) -> list[list[Any]]:
    """Writes of one replica that act on plans: (time, listener, method, kind, name, status)."""
    return [w for w in log if w[1] == listener and not w[3].startswith(NOT_ACTING)]


def test_one_replica_acts_and_the_other_takes_over(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    proxy: FaultProxy,
    make_nodes: Callable[..., list[str]],
    replicas: tuple[ChaosOperator, ChaosOperator],
) -> None:
    low, high = replicas
    nodes = make_nodes("peers", 4)
    gpu_type = nodes[0].rsplit("-", 1)[0]

    def spec(cards: int) -> dict[str, Any]:
        return one_type(gpu_type, {"lead": {"G": cards}}, [operator_entry("lead", "service")], deploy=True)

    kubectl.apply(plan_manifest(ns, "led", spec(4)))
    wait_for("the plan converged", converged(api, ns, "led"), timeout=90)
    log = proxy.stats()["write_log"]
    assert acting(log, "peer-high"), "the high-priority replica wrote nothing"
    assert not acting(log, "peer-low"), f"the paused replica acted: {acting(log, 'peer-low')[:5]}"

    mark = low.mark()
    killed = time.time()
    high.kill()  # SIGKILL: no goodbye in the peering record, the other must wait for it to expire
    kubectl.apply(plan_manifest(ns, "led", spec(6)))
    wait_for(
        "the other replica to resume",
        lambda: "Resuming operations" in low.log_since(mark),
        timeout=PEERING_LIFETIME + 60,
    )
    resumed = time.time()
    status = wait_for("the change applied by the other replica", converged(api, ns, "led"), timeout=90)
    done = time.time()
    assert status["cards"] == "6/6"

    log = proxy.stats()["write_log"]
    by_high, by_low = acting(log, "peer-high"), acting(log, "peer-low")
    assert by_low, "the surviving replica wrote nothing"
    high_after_kill = [w for w in by_high if w[0] > killed]
    low_before_kill = [w for w in by_low if w[0] < killed]
    takeover = resumed - killed
    Figures.record(
        "two replicas",
        writes_by_leader=len(by_high),
        writes_by_standby_while_leader_lived=len(low_before_kill),
        writes_by_leader_after_its_death=len(high_after_kill),
        takeover_s=round(takeover, 1),
        change_applied_after_kill_s=round(done - killed, 1),
        documented_takeover_s=PEERING_LIFETIME,
    )
    assert not low_before_kill, f"both replicas acted at the same time: {low_before_kill[:5]}"
    assert not high_after_kill, f"the killed replica still wrote: {high_after_kill[:5]}"
    assert takeover <= PEERING_LIFETIME + SLACK_S, f"took over after {takeover:.1f}s"

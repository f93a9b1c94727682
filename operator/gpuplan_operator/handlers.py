"""kopf handlers: thin. They call :class:`~.service.PlanService` and tell kopf what to do next.

Notes
-----
- Clients are built in the start-up handler and kept in kopf's ``memo``, never at import time.
- The service is synchronous (the ``kubernetes`` client and the solver are); handlers run it in a
  thread with :func:`asyncio.to_thread`, so the event loop keeps serving watches, and bump the
  :class:`~.watch.ChangeFeed` from the loop's thread afterwards.
- The service returns an :class:`~.service.Outcome`; only the create/update/resume handlers turn
  it into what kopf understands (:func:`_tell_kopf`): Invalid raises :class:`kopf.PermanentError`
  (status already says why; no retries until the spec changes), Error raises
  :class:`kopf.TemporaryError` (retried with a delay). The per-plan daemon reads outcomes as
  values and never goes through exceptions.
- Nodes are watched with an event handler, never a daemon or timer, so no finalizer lands on them.
  Each plan has a daemon that waits on the feed and re-plans after a burst settles; daemons also
  poll readiness while pods are pending and re-plan Infeasible/Error plans every ``resync``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, cast

import kopf

from gpuplan_operator.body import PlanBody
from gpuplan_operator.kube import Kube, load_api_client
from gpuplan_operator.metrics import Metrics, Trigger
from gpuplan_operator.service import Options, Outcome, PlanService
from gpuplan_operator.status import Phase
from gpuplan_operator.watch import ChangeFeed, NodeTracker, slice_fingerprint, topology_fingerprint
from planner.vocab import GROUP, PLURAL, VERSION

log = logging.getLogger("gpuplan_operator")
PLAN = (GROUP, VERSION, PLURAL)


def post_event(plan: PlanBody, type_: str, reason: str, message: str) -> None:
    """Kubernetes Event on the plan (kopf queues it; safe from the service's worker thread)."""
    kopf.event(cast(kopf.Body, plan.raw), type=type_, reason=reason, message=message[:1000])


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300  # re-open watches regularly (kopf #1276)
    settings.watching.client_timeout = 330
    options = memo.get("options") or Options()
    kube = Kube(load_api_client(), observer=memo.get("write_observer"))
    memo.options = options
    memo.service = PlanService(kube, options, post_event, metrics=memo.get("metrics") or Metrics())
    memo.feed = ChangeFeed()
    memo.nodes = NodeTracker()
    memo.slices = NodeTracker(slice_fingerprint)
    memo.topologies = NodeTracker(topology_fingerprint)


async def _reconcile(memo: kopf.Memo, namespace: str | None, name: str, trigger: Trigger) -> Outcome | None:
    """Reconcile in a worker thread; wake the other plans when this one's placement moved."""
    service: PlanService = memo.service
    assert namespace is not None  # plans are namespaced
    outcome = await asyncio.to_thread(service.reconcile, namespace, name, trigger)
    if outcome is not None and outcome.moved:
        await memo.feed.bump(origin=f"{namespace}/{name}")
    return outcome


def _tell_kopf(outcome: Outcome | None, memo: kopf.Memo) -> None:
    """An outcome as kopf's handler protocol: Invalid stops retrying, Error retries."""
    if outcome is None:
        return
    if outcome.phase is Phase.INVALID:
        raise kopf.PermanentError(outcome.message)
    if outcome.phase is Phase.ERROR:
        raise kopf.TemporaryError(outcome.message, delay=min(memo.options.resync, 10.0))


@kopf.on.create(*PLAN)
async def plan_created(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    _tell_kopf(await _reconcile(memo, namespace, name, Trigger.CREATED), memo)


@kopf.on.update(*PLAN, field="spec")
async def plan_updated(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    _tell_kopf(await _reconcile(memo, namespace, name, Trigger.SPEC_CHANGED), memo)


@kopf.on.resume(*PLAN)
async def plan_resumed(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    _tell_kopf(await _reconcile(memo, namespace, name, Trigger.RESUMED), memo)


@kopf.on.delete(*PLAN)
async def plan_deleted(memo: kopf.Memo, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
    service: PlanService = memo.service
    changes = await asyncio.to_thread(service.cleanup, dict(body))
    if changes:
        await memo.feed.bump(origin=f"{namespace}/{name}")  # its cards are free for the others


@kopf.on.event("", "v1", "nodes")
async def node_event(memo: kopf.Memo, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    tracker: NodeTracker = memo.nodes
    if tracker.observe(event.get("type"), body):
        log.debug("node %s changed (%s): re-plan", body.get("metadata", {}).get("name"), event.get("type"))
        await memo.feed.bump(origin=None)


@kopf.on.event("resource.k8s.io", "v1", "resourceslices")
async def slice_event(memo: kopf.Memo, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    """A driver published, changed or withdrew a node's GPUs (DRA): plans re-plan, as for nodes.

    Slices are per node and change when devices come or go, not on heartbeats; a cluster that does
    not serve resource.k8s.io/v1 has none, and kopf leaves this handler idle."""
    tracker: NodeTracker = memo.slices
    if tracker.observe(event.get("type"), body):
        await memo.feed.bump(origin=None)


@kopf.on.event("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
async def topology_event(memo: kopf.Memo, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    """A node's NUMA zones appeared, changed size or went (NodeResourceTopology): plans re-plan.

    The topology updater rewrites these objects every minute and whenever pods come and go; only
    a change of the zones' shape, their capacity or allocatable, or the kubelet's policy counts
    (:func:`~.watch.topology_fingerprint`). Without the CRD kopf leaves this handler idle."""
    tracker: NodeTracker = memo.topologies
    if tracker.observe(event.get("type"), body):
        await memo.feed.bump(origin=None)


@kopf.daemon(*PLAN, cancellation_backoff=2.0, cancellation_timeout=5.0)
async def follow_cluster(
    stopped: kopf.DaemonStopped, memo: kopf.Memo, namespace: str | None, name: str, **_: Any
) -> None:
    """Re-plan after node (or other plans') changes; keep ``Ready`` and failed plans fresh."""
    feed: ChangeFeed = memo.feed
    options: Options = memo.options
    service: PlanService = memo.service
    assert namespace is not None  # plans are namespaced
    me = f"{namespace}/{name}"
    seen = feed.version
    phase, ready = Phase.APPLIED, False  # until the first check says otherwise: poll soon
    while not stopped:
        wait = options.ready_poll if phase is Phase.APPLIED and not ready else options.resync
        changed = await _wait(feed, seen, wait, stopped)
        if stopped:
            break
        try:
            if changed:
                version = await feed.settle(options.debounce, options.max_delay)
                origins = feed.origins_since(seen)
                seen = version
                if origins == {me}:
                    continue  # only our own placement changed: nothing new to plan against
                why = Trigger.NODES_CHANGED if None in origins else Trigger.PLANS_CHANGED
                outcome = await _reconcile(memo, namespace, name, why)
            elif phase in (Phase.INFEASIBLE, Phase.ERROR):
                outcome = await _reconcile(memo, namespace, name, Trigger.RETRY)
            else:
                outcome = await asyncio.to_thread(service.refresh_readiness, namespace, name)
        except Exception:  # an API hiccup outside a reconcile: log it loudly, try again at the next resync
            log.exception("%s: re-plan failed", me)
            phase = Phase.ERROR
            continue
        if outcome is not None:
            phase, ready = outcome.phase, outcome.ready


async def _wait(feed: ChangeFeed, seen: int, timeout: float, stopped: kopf.DaemonStopped) -> bool:
    """Wait for a cluster change, a timeout, or the daemon being stopped (plan deleted, exit)."""
    changed = asyncio.ensure_future(feed.wait_beyond(seen, timeout))
    stop = asyncio.ensure_future(stopped.wait())
    done, pending = await asyncio.wait({changed, stop}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return changed in done and bool(changed.result())

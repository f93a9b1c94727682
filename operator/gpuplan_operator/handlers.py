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
- Nodes are watched with an event handler, never a daemon, so no finalizer lands on them. A node
  that stops being Ready is looked at again when its grace (``--node-grace``) runs out, by a
  timer on the event loop: no node event marks that moment.
- Each plan has a daemon that waits on the feed and re-plans after a burst settles; daemons also
  poll readiness while pods are pending and re-plan Infeasible plans every ``resync``.
- Every reconcile, handler or daemon, records its outcome in the plan's
  :class:`~.follow.PlanState` (``memo.plans``), which wakes the daemon: after a spec change the
  daemon polls readiness every ``ready_poll`` at once, not after its next ``resync``. A sweep
  started with the operator lists the plans' pods every ``ready_poll`` (one request) and wakes
  the daemons of plans whose pods changed (deleted by hand, rescheduled).
- Failures retry with exponential backoff (:func:`~.follow.backoff`, 1 s doubling to 10 s, with
  jitter): kopf's ``TemporaryError`` delay for handlers (its ``retry`` count), and the daemon's
  own wait, which retries every failed reconcile whoever ran it (kopf loses a handler's retry
  when it cannot patch the plan to record it), and reconciles a plan whose status still does not
  describe its spec a poll after finding it so. The delete handler retries its clean-up itself.
- With ``--peering``, each replica renews its peering record every 10-15 s for ``PEERING_LIFETIME``
  (20 s): when the acting replica dies, another takes over within 20 s of its last renewal.
- Watches are re-opened every ``WATCH_SECONDS`` by the API server and abandoned by the client when
  silent for ``WATCH_SILENCE`` seconds (a stream that ends without a word, kopf's known failure
  mode): changes missed meanwhile arrive when the watch resumes from its last resourceVersion.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from enum import Enum
from typing import Any, TypeVar, cast

import kopf
from kubernetes.client.exceptions import ApiException

from gpuplan_operator.body import PlanBody
from gpuplan_operator.follow import Plans, PlanState, backoff
from gpuplan_operator.kube import Kube, api_error_message, load_api_client
from gpuplan_operator.metrics import Metrics, Trigger
from gpuplan_operator.service import Options, Outcome, PlanService
from gpuplan_operator.status import Phase
from gpuplan_operator.watch import (
    ChangeFeed,
    NodeTracker,
    SpecTracker,
    slice_fingerprint,
    topology_fingerprint,
)
from planner import GROUP, PLAN_LABEL, PLURAL, VERSION, plan_labels

log = logging.getLogger("gpuplan_operator")
T = TypeVar("T")
PLAN = (GROUP, VERSION, PLURAL)
WATCH_SECONDS = 15  # the API server ends each watch after this long; kopf resumes it at once
PEERING_LIFETIME = 20  # a replica silent this long is dead: with --peering, another takes over
WATCH_SILENCE = 20.0  # a watch silent this long is dead: re-open it (bookmarks would come each minute)


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
    # re-open watches regularly (kopf #1276), and give up on a silent one well within 30 s
    settings.watching.server_timeout = WATCH_SECONDS
    settings.watching.client_timeout = WATCH_SILENCE
    settings.watching.inactivity_timeout = WATCH_SILENCE
    settings.peering.lifetime = PEERING_LIFETIME  # kopf's default is 60 s
    options = memo.get("options") or Options()
    kube = Kube(load_api_client(), observer=memo.get("write_observer"))
    memo.options = options
    memo.service = PlanService(kube, options, post_event, metrics=memo.get("metrics") or Metrics())
    memo.feed = ChangeFeed()
    memo.nodes = NodeTracker(options.node_grace)
    memo.slices = SpecTracker(slice_fingerprint)
    memo.topologies = SpecTracker(topology_fingerprint)
    memo.node_timers = {}
    memo.background = set()
    memo.plans = Plans()
    memo.sweep = asyncio.create_task(_sweep_pods(memo), name="gpuplan pod sweep")


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    sweep: asyncio.Task[None] | None = memo.get("sweep")
    if sweep is not None:
        sweep.cancel()
        await asyncio.gather(sweep, return_exceptions=True)


async def _sweep_pods(memo: kopf.Memo) -> None:
    """Every ``ready_poll``: list the plans' pods once, wake the daemons whose pods changed."""
    options: Options = memo.options
    plans: Plans = memo.plans
    service: PlanService = memo.service
    failures = 0
    while True:
        await asyncio.sleep(backoff(failures) if failures else options.ready_poll)
        if not plans.states:  # no daemon runs (none yet, or this replica is not the one acting)
            continue
        try:
            pods = await asyncio.to_thread(service.operator_pods)
        except Exception as e:  # the API server is away: the daemons' own polls still run
            failures += 1
            error = api_error_message(e) if isinstance(e, ApiException) else repr(e)
            log.warning("listing the plans' pods failed (%s); again in a moment", error)
            continue
        failures = 0
        for key in plans.sweep(pods, lambda name: plan_labels(name)[PLAN_LABEL]):
            log.debug("%s: its pods changed: re-check readiness", key)


async def _reconcile(memo: kopf.Memo, namespace: str | None, name: str, trigger: Trigger) -> Outcome | None:
    """Reconcile in a worker thread; tell the plan's daemon how it ended; wake the other plans
    when this one's placement moved."""
    service: PlanService = memo.service
    assert namespace is not None  # plans are namespaced
    outcome = await asyncio.to_thread(service.reconcile, namespace, name, trigger)
    if outcome is not None:
        _state(memo, namespace, name).record(outcome.phase, outcome.ready)
        if outcome.moved:
            await memo.feed.bump(origin=f"{namespace}/{name}")
    return outcome


def _state(memo: kopf.Memo, namespace: str, name: str) -> PlanState:
    plans: Plans = memo.plans
    return plans.state(f"{namespace}/{name}")


def _tell_kopf(outcome: Outcome | None, retry: int) -> None:
    """An outcome as kopf's handler protocol: Invalid stops retrying, Error retries with backoff."""
    if outcome is None:
        return
    if outcome.phase is Phase.INVALID:
        raise kopf.PermanentError(outcome.message)
    if outcome.phase is Phase.ERROR:
        raise kopf.TemporaryError(outcome.message, delay=backoff(retry + 1))


@kopf.on.create(*PLAN)
async def plan_created(memo: kopf.Memo, namespace: str | None, name: str, retry: int, **_: Any) -> None:
    _tell_kopf(await _reconcile(memo, namespace, name, Trigger.CREATED), retry)


@kopf.on.update(*PLAN, field="spec")
async def plan_updated(memo: kopf.Memo, namespace: str | None, name: str, retry: int, **_: Any) -> None:
    _tell_kopf(await _reconcile(memo, namespace, name, Trigger.SPEC_CHANGED), retry)


@kopf.on.resume(*PLAN)
async def plan_resumed(memo: kopf.Memo, namespace: str | None, name: str, retry: int, **_: Any) -> None:
    _tell_kopf(await _reconcile(memo, namespace, name, Trigger.RESUMED), retry)


@kopf.on.delete(*PLAN)
async def plan_deleted(memo: kopf.Memo, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
    """Undo everything the plan wrote; retried here, with backoff, until the API server lets it.

    Not through kopf's ``TemporaryError``: kopf records each retry by patching the plan, and when
    the API server refuses that patch too, kopf forgets the deletion until some later event about
    the plan, which for a plan being deleted never comes (and no daemon runs for it any more).
    """
    service: PlanService = memo.service
    failures = 0
    while True:
        try:
            changes = await asyncio.to_thread(service.cleanup, dict(body))
            break
        except ApiException as e:  # the finalizer stays until the clean-up is done
            failures += 1
            delay = backoff(failures)
            log.warning(
                "%s/%s: clean-up failed (%s); again in %.1fs", namespace, name, api_error_message(e), delay
            )
            await asyncio.sleep(delay)
    memo.plans.drop(f"{namespace}/{name}")
    if changes:
        await memo.feed.bump(origin=f"{namespace}/{name}")  # its cards are free for the others


@kopf.on.event("", "v1", "nodes")
async def node_event(memo: kopf.Memo, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    tracker: NodeTracker = memo.nodes
    name = str(body.get("metadata", {}).get("name"))
    if tracker.observe(event.get("type"), body):
        log.debug("node %s changed (%s): re-plan", name, event.get("type"))
        await memo.feed.bump(origin=None)
    _time_node_grace(memo, name)


def _time_node_grace(memo: kopf.Memo, name: str) -> None:
    """A node that is not Ready: look at it again when its grace runs out (no event says so)."""
    timers: dict[str, asyncio.TimerHandle] = memo.node_timers
    tracker: NodeTracker = memo.nodes
    if (old := timers.pop(name, None)) is not None:
        old.cancel()
    delay = tracker.recheck_in(name)
    if delay is None:
        return

    def fire() -> None:
        timers.pop(name, None)
        if tracker.recheck(name):
            log.info("node %s has not been Ready for %.0fs: re-plan without it", name, tracker.grace)
            bump = asyncio.ensure_future(memo.feed.bump(origin=None))
            memo.background.add(bump)  # keep a reference until it is done
            bump.add_done_callback(memo.background.discard)
        _time_node_grace(memo, name)

    timers[name] = asyncio.get_running_loop().call_later(delay + 0.5, fire)


@kopf.on.event("resource.k8s.io", "v1", "resourceslices")
async def slice_event(memo: kopf.Memo, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    """A driver published, changed or withdrew a node's GPUs (DRA): plans re-plan, as for nodes.

    A cluster that does not serve resource.k8s.io/v1 has no slices, and kopf leaves this idle."""
    tracker: SpecTracker = memo.slices
    if tracker.observe(event.get("type"), body):
        await memo.feed.bump(origin=None)


@kopf.on.event("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
async def topology_event(memo: kopf.Memo, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    """A node's NUMA zones appeared, changed size or went (NodeResourceTopology): plans re-plan.

    The topology updater rewrites these objects every minute and whenever pods come and go; only
    a change of the zones' shape, their capacity or allocatable, or the kubelet's policy counts
    (:func:`~.watch.topology_fingerprint`). Without the CRD kopf leaves this handler idle."""
    tracker: SpecTracker = memo.topologies
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
    state = _state(memo, namespace, name)
    seen = feed.version
    try:
        while not stopped:
            wait = state.next_wait(options.ready_poll, options.resync)
            why = await _wait(feed, seen, wait, stopped, state)
            if why is _Woken.STOPPED:
                break
            try:
                if why is _Woken.FEED:
                    woke = time.monotonic()
                    version = await _unless_stopped(feed.settle(options.debounce, options.max_delay), stopped)
                    if version is None:
                        break
                    origins = feed.origins_since(seen)
                    seen = version
                    if origins == {me}:
                        continue  # only our own placement changed: nothing new to plan against
                    why_replan = Trigger.NODES_CHANGED if None in origins else Trigger.PLANS_CHANGED
                    settled = time.monotonic() - woke
                    log.info("%s: re-planning (%s; settled in %.1fs)", me, why_replan.value, settled)
                    await _unless_stopped(_reconcile(memo, namespace, name, why_replan), stopped)
                elif why is _Woken.STATE and not state.take_recheck():
                    continue  # a handler's outcome: only the waits change
                elif why is _Woken.TIMEOUT and state.must_reconcile():
                    await _unless_stopped(_reconcile(memo, namespace, name, Trigger.RETRY), stopped)
                else:  # time to poll readiness, or the sweep saw the plan's pods change
                    check = asyncio.to_thread(service.refresh_readiness, namespace, name)
                    outcome = await _unless_stopped(check, stopped)
                    if outcome is not None:
                        state.checked(outcome.phase, outcome.ready, outcome.stale)
            except Exception as e:  # an API hiccup outside a reconcile: back off, then look again
                state.failed()
                error = api_error_message(e) if isinstance(e, ApiException) else repr(e)
                log.warning("%s: re-plan or readiness check failed (%s); retry %d", me, error, state.failures)
    finally:
        memo.plans.drop(me)


async def _unless_stopped(work: Coroutine[Any, Any, T], stopped: kopf.DaemonStopped) -> T | None:
    """The work's result, or None as soon as the daemon is stopped (the plan is being deleted).

    Waiting for a burst of changes to settle takes up to ``max_delay``, and a reconcile runs in a
    thread that may wait for the service's lock behind a queue of clean-ups: kopf would cancel
    (and run the deletion again for) a daemon that does not stop within its backoff. Abandoned
    work finds the plan being deleted and does nothing.
    """
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopped.wait())
    await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    if task.done():
        return task.result()
    task.cancel()  # a coroutine still waiting stops; a thread already running finishes unseen
    task.add_done_callback(_quietly)
    return None


def _quietly(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("abandoned work of a stopped daemon failed: %s", task.exception())


class _Woken(Enum):
    FEED = "a cluster change"
    STATE = "a reconcile elsewhere, or the plan's pods changed"
    TIMEOUT = "time to look again"
    STOPPED = "the plan is being deleted, or the operator stops"


async def _wait(
    feed: ChangeFeed, seen: int, timeout: float, stopped: kopf.DaemonStopped, state: PlanState
) -> _Woken:
    """Wait for a cluster change, news about the plan, a timeout, or the daemon being stopped."""
    tasks = {
        asyncio.ensure_future(feed.wait_beyond(seen, timeout)): _Woken.FEED,
        asyncio.ensure_future(state.wake.wait()): _Woken.STATE,
        asyncio.ensure_future(stopped.wait()): _Woken.STOPPED,
    }
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    woken = {tasks[t] for t in done}
    if stopped or _Woken.STOPPED in woken:
        return _Woken.STOPPED
    if _Woken.STATE in woken:
        state.wake.clear()
        return _Woken.STATE
    feed_task = next(t for t, w in tasks.items() if w is _Woken.FEED)
    return _Woken.FEED if feed_task in done and feed_task.result() else _Woken.TIMEOUT

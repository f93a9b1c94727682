"""kopf handlers: thin. Start the caches and the cycle; clean up a deleted plan; nothing else.

Notes
-----
- Clients are built in the start-up handler and kept in kopf's ``memo``, never at import time.
- Planning is not done per event. The start-up handler starts the watched caches
  (:class:`~.cache.caches.ClusterCache`, with a client of its own: six long watches must not
  hold the writers' connections) and one task that runs the scheduling cycle
  (:func:`~.cycle.loop.run_cycles`, started by the first plan's daemon, in the context kopf
  gives handlers, which ``kopf.event`` needs): every change a watch reports wakes it, and it plans every
  plan that needs it, in admission order, from one snapshot. A plan created, changed or
  resumed is planned by the next cycle; kopf does not need a handler for it.
- kopf keeps two jobs: the finalizer and clean-up of a deleted plan (:func:`plan_deleted`,
  retried with backoff until the API server lets it), and peering. With ``--peering`` only one
  replica acts: kopf stops the per-plan daemon (:func:`follow_plan`) of a replica that must
  not, and the cycle runs only while this replica has a daemon running.
- The service is synchronous (the ``kubernetes`` client and the solver are); the cycle and the
  clean-up run in worker threads with :func:`asyncio.to_thread`, one at a time (the service's
  lock), so the event loop keeps serving kopf's watches and peering.
- With ``--peering``, each replica renews its peering record every 10-15 s for
  ``PEERING_LIFETIME`` (20 s): when the acting replica dies, another takes over within 20 s.
- kopf's diff-base (the last handled state, an annotation) is a digest of the plan's spec, labels
  and annotations (:class:`DigestDiffBase`), not kopf's default copy of them: kopf has no change
  handler here to give a diff to, and the copy was a sixth of a large plan's object, sent back by
  every status patch and in every watch event of it.
- kopf's own watches (plans, for the finalizer) are re-opened every ``WATCH_SECONDS`` and
  abandoned when silent for ``WATCH_SILENCE`` seconds; the caches' watches do the same
  (:mod:`.cache.informer`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterable
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException

from gpuplan_operator.body import FINALIZER, PlanBody
from gpuplan_operator.cache.caches import ClusterCache
from gpuplan_operator.cycle.loop import Wake, run_cycles
from gpuplan_operator.cycle.session import Cycle
from gpuplan_operator.follow import backoff
from gpuplan_operator.kube import Kube, api_error_message, load_api_client
from gpuplan_operator.metrics import Metrics
from gpuplan_operator.service import Options, PlanService
from planner import GROUP, PLURAL, VERSION

log = logging.getLogger("gpuplan_operator")
PLAN = (GROUP, VERSION, PLURAL)
WATCH_SECONDS = 15  # the API server ends each watch after this long; kopf resumes it at once
PEERING_LIFETIME = 20  # a replica silent this long is dead: with --peering, another takes over
WATCH_SILENCE = 20.0  # a watch silent this long is dead: re-open it (bookmarks would come each minute)


class DigestDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's "last handled" state as a digest of what kopf would have copied.

    Equal digests are equal states, so kopf still tells a change from an echo; an annotation of
    kopf's full copy (from an operator before this one) differs from any digest, so the first
    event of such a plan stores the digest in its place. kopf's copy of the whole object (status
    too, a plan's largest part) before it keeps the spec, labels and annotations was a third of
    kopf's CPU through a 1,000-node deploy: only those are handed to it."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        if not extra_fields:  # kopf copies the object whole, then drops all but these: copy only them
            meta = body.get("metadata") or {}
            kept = {k: v for k, v in body.items() if k not in ("metadata", "status")}
            kept["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
            body = kopf.Body(cast(kopf.RawBody, kept))
        essence = super().build(body=body, extra_fields=extra_fields)
        text = json.dumps(essence, sort_keys=True, separators=(",", ":"))
        return cast(kopf.BodyEssence, {"digest": hashlib.sha256(text.encode()).hexdigest()})


class CycleTask:
    """The one task that runs the scheduling cycle (None until the first plan's daemon starts it)."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None


def post_event(plan: PlanBody, type_: str, reason: str, message: str) -> None:
    """Kubernetes Event on the plan (kopf queues it; safe from the service's worker thread)."""
    kopf.event(cast(kopf.Body, plan.raw), type=type_, reason=reason, message=message[:1000])


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = DigestDiffBase(prefix=GROUP, key="last-handled-configuration")
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = WATCH_SECONDS
    settings.watching.client_timeout = WATCH_SILENCE
    settings.watching.inactivity_timeout = WATCH_SILENCE
    settings.peering.lifetime = PEERING_LIFETIME  # kopf's default is 60 s
    options = memo.get("options") or Options()
    kube = Kube(load_api_client(), observer=memo.get("write_observer"))
    memo.options = options
    memo.service = service = PlanService(kube, options, post_event, metrics=memo.get("metrics") or Metrics())
    memo.wake = wake = Wake(asyncio.get_running_loop(), options.debounce, options.max_delay, options.settle)
    namespaces = memo.get("namespaces") or ()
    memo.cache = cache = ClusterCache(Kube(load_api_client()), wake.poke, namespaces=namespaces)
    memo.acting = set()
    cache.start()
    memo.cycle = Cycle(service, cache, namespaces)
    # the cycle's task, started by the first plan's daemon (below). A holder, not a memo key:
    # each plan's memo is a shallow copy of this one, so a key set there is that plan's alone
    # (every plan's daemon then started a cycle loop of its own, N loops taking turns on the lock)
    memo.cycles = CycleTask()


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    holder: CycleTask | None = memo.get("cycles")
    if holder is not None and holder.task is not None:
        holder.task.cancel()
        await asyncio.gather(holder.task, return_exceptions=True)
    cache: ClusterCache | None = memo.get("cache")
    if cache is not None:
        cache.close()


@kopf.on.delete(*PLAN)
async def plan_deleted(memo: kopf.Memo, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
    """Undo everything the plan wrote; retried here, with backoff, until the API server lets it.

    Not through kopf's ``TemporaryError``: kopf records each retry by patching the plan, and when
    the API server refuses that patch too, kopf forgets the deletion until some later event about
    the plan, which for a plan being deleted never comes.
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
    if changes:
        memo.wake.now()  # its cards are free for the others


@kopf.daemon(*PLAN, cancellation_backoff=2.0, cancellation_timeout=5.0)
async def follow_plan(
    stopped: kopf.DaemonStopped, memo: kopf.Memo, namespace: str | None, name: str, **_: Any
) -> None:
    """Runs while this replica acts for the plan: its presence lets the cycle run (peering)."""
    key = f"{namespace}/{name}"
    acting: set[str] = memo.acting
    acting.add(key)
    holder: CycleTask = memo.cycles
    if holder.task is None:
        # started from a handler, not at start-up: kopf.event (the cycle's Events) needs the
        # context kopf gives its handlers, which the task inherits
        options: Options = memo.options
        cycles = run_cycles(memo.cycle, memo.wake, lambda: bool(memo.acting), options.resync)
        holder.task = asyncio.create_task(cycles, name="gpuplan cycle")
    memo.wake.now()
    try:
        await stopped.wait()
    finally:
        acting.discard(key)

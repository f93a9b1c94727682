"""Carry out computed writes: step by step, and the writes of one step side by side.

Notes
-----
:mod:`.writes` decides what to write and in which :class:`~.writes.Step`; this module only sends
it. Steps run in order, because their order is what keeps cards free and pods from referring to
labels and classes that do not exist yet; steps that do not depend on each other go out together
(one :func:`~.writes.wave`: labels, classes and claim templates; then the ConfigMap and the
Deployments; then what is no longer used). Inside a wave every write is independent (different
nodes, different Deployments), so they are sent by a small thread pool: a 250-pod plan labels and
deploys in a few round trips of wall time instead of one per object, and a cordon's re-plan in
four. The API server and the client's connection pool (:func:`~.kube.load_api_client`) bound
the parallelism.

When a write fails, the wave's other writes still finish (they were already in flight), the
later waves do not start, and the first error is raised: the plan ends in ``phase: Error`` and the
next reconcile computes the writes again from what did land. Each write the API server accepts
is counted in ``gpuplan_writes_total{kind}``, a failed step in ``gpuplan_apply_errors_total{kind}``.

A long wave (a new plan's thousands of Deployments) can run something ``meanwhile``: the caller's
thread calls it every ``every`` seconds while the wave's writes are in flight (the cycle lifts the
gang gates of the pods those Deployments have made so far, so creating pods and scheduling them
overlap).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import Counter
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from itertools import groupby
from typing import TypeVar

from gpuplan_operator import cluster
from gpuplan_operator.kube import JSON, KubeApi
from gpuplan_operator.metrics import Metrics
from gpuplan_operator.writes import Step, Verb, Write, in_order, remember_applied, selects, sets, wave

PARALLEL_WRITES = 8  # at most this many requests in flight (the connection pool's size)
MEANWHILE_EVERY = 0.2  # seconds between the calls of ``meanwhile`` during a long wave

A = TypeVar("A")
R = TypeVar("R")


def in_context(fn: Callable[[A], R]) -> Callable[[A], R]:
    """``fn`` run in the caller's context vars when a pool thread calls it.

    A thread pool's threads start with an empty context, and ``kopf.event`` (the Events a plan's
    apply posts) reads kopf's settings from a context var: called from a bare pool thread it
    raises ``LookupError`` and the whole cycle fails. Each call runs in its own copy (one context
    cannot be entered by two threads at once)."""
    context = contextvars.copy_context()

    def run(arg: A) -> R:
        return context.copy().run(fn, arg)

    return run


Landed = Callable[[Write, JSON | None], None]


class Meanwhile:
    """Waits for futures, calling ``call`` from the waiting thread every ``every`` seconds (never
    concurrently with itself) while one is still running; ``call`` None just waits."""

    def __init__(self, call: Callable[[], None] | None, every: float | None = None) -> None:
        self.call = call
        self.every = MEANWHILE_EVERY if every is None else every
        self.next_at = time.monotonic() + self.every

    def result(self, future: Future[R]) -> R:
        while self.call is not None and not future.done():
            left = self.next_at - time.monotonic()
            if left > 0:
                wait([future], timeout=left)
                continue
            self.call()
            self.next_at = time.monotonic() + self.every
        return future.result()

    def map(self, pool: ThreadPoolExecutor, fn: Callable[[A], R], items: Sequence[A]) -> list[R]:
        """``pool.map(fn, items)``, waited for this way."""
        futures = [pool.submit(fn, item) for item in items]
        return [self.result(f) for f in futures]


def _send(kube: KubeApi, write: Write) -> tuple[bool, JSON | None]:
    """One write and what the API server returned for an apply; False when a delete found the
    object already gone."""
    if write.verb is Verb.CREATE:
        assert write.manifest is not None
        created = cluster.create_object(kube, write.manifest)
        if created is None:  # the name is taken (the create of an operator that died): apply
            return True, cluster.apply_object(kube, write.manifest)
        return True, created
    if write.verb is Verb.APPLY:
        assert write.manifest is not None
        return True, cluster.apply_object(kube, write.manifest)
    if write.verb is Verb.LABEL:
        assert write.labels is not None
        cluster.patch_node_labels(kube, write.name, write.labels)
        return True, None
    return cluster.delete_object(kube, write.kind, write.name, write.namespace), None


class LabelNotWritten(Exception):
    """A Deployment not sent: a node label its pods select did not land."""


Sent = Future[tuple[bool, JSON | None]]


def _send_after(pool: ThreadPoolExecutor, kube: KubeApi, write: Write, labels: list[Sent]) -> Sent:
    """``write`` sent once ``labels`` (the node labels its pods select) have landed, not at all
    when one of them failed (that failure is the wave's). Nothing waits in a worker meanwhile: a
    Deployment blocking a worker until its label landed left a 2,480-Deployment plan's writes
    with a few requests in flight instead of eight (56-63 s against 37-50 s at 1,000 nodes)."""
    out: Sent = Future()
    lock = threading.Lock()
    left = [len(labels)]

    def forward(sent: Sent) -> None:
        error = sent.exception()
        if error is not None:
            out.set_exception(error)
        else:
            out.set_result(sent.result())

    def landed(label: Sent) -> None:
        with lock:
            if out.done() or left[0] == 0:
                return
            if label.exception() is not None:
                left[0] = 0
                out.set_exception(
                    LabelNotWritten(f"{write.kind} {write.name}: its node's label was not written")
                )
                return
            left[0] -= 1
            if left[0]:
                return
        pool.submit(_send, kube, write).add_done_callback(forward)

    for label in labels:
        label.add_done_callback(landed)
    return out


def perform(
    kube: KubeApi,
    writes: Sequence[Write],
    metrics: Metrics,
    parallel: int = PARALLEL_WRITES,
    landed: Landed | None = None,
    took: MutableMapping[str, float] | None = None,
    meanwhile: Callable[[], None] | None = None,
    every: float | None = None,
    waves: Callable[[Step], int] = wave,
    after_labels: bool = False,
) -> list[Write]:
    """Send ``writes`` wave by wave; returns them once all landed, raises the first failure.
    ``landed`` hears of each write that landed (a delete of something already gone too), with
    the object an apply returned: the caches take it in before its watch event comes. ``took``
    gets the wall seconds of each wave, named by its steps (``configmap 1+deployments 3``), for
    the log line. ``meanwhile``: called from this thread every ``every`` seconds while a wave's
    writes are in flight (never concurrently with itself, never after the last wave; ``every``
    defaults to :data:`MEANWHILE_EVERY`). ``waves``: the round of each step (:func:`~.writes.wave`,
    or :func:`~.writes.paired_wave`, a plan's labels in its Deployments' round). ``after_labels``:
    a Deployment in the round of the labels it selects is sent once they have landed (its pods
    are not gated: made before their node's label, they would be tried on no node). The labels
    then go out in order through a pool of their own, as many at once as the other writes: each
    Deployment follows its own label instead of queueing behind all of them, and the labels
    go as fast as they went in a round of their own (a higher-priority plan's 250 took 4.6 s)."""
    awaiting = Meanwhile(meanwhile, every)

    ordered = in_order(writes, waves)
    if not ordered:
        return []
    with (  # the label pool starts no thread unless ``after_labels`` sends through it
        ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="gpuplan-write") as pool,
        ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="gpuplan-label") as labels,
    ):
        for _, group in groupby(ordered, key=lambda w: waves(w.step)):
            batch = list(group)
            steps = Counter(w.step for w in batch)
            name = "+".join(f"{s.name.lower()} {n}" for s, n in sorted(steps.items()))
            started = time.perf_counter()
            futures = []
            sending: dict[tuple[str, str], list[Sent]] = {}
            for w in batch:
                after = [f for pair in selects(w) for f in sending.get(pair, ())] if after_labels else []
                if after:
                    future = _send_after(pool, kube, w, after)
                elif after_labels and w.step is Step.LABEL_NODES:  # in order, ahead of the Deployments
                    future = labels.submit(_send, kube, w)
                else:
                    future = pool.submit(_send, kube, w)
                futures.append((w, future))
                if w.step is Step.LABEL_NODES:
                    for pair in sets(w):
                        sending.setdefault(pair, []).append(future)
            failure: tuple[Write, Exception] | None = None
            for write, future in futures:
                try:
                    accepted, obj = awaiting.result(future)
                except Exception as e:
                    failure = failure or (write, e)
                    continue
                remember_applied(write, obj)
                if landed is not None:
                    landed(write, obj)
                if accepted:
                    metrics.wrote(write.kind)
            if took is not None:
                took[name] = time.perf_counter() - started
            if failure is not None:
                metrics.apply_failed(failure[0].kind)  # one failed wave, of the kind that failed first
                raise failure[1]
    return ordered

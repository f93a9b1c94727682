"""Shared vocabulary: the API's names, the keys and labels gpuplan writes, and how names are made.

Notes
-----
Everything that names a thing in the cluster lives here, once: the resource's group, version and
kind, the label domain, the labels on every object a plan writes, the PriorityClass names, and the
rules that fit generated names into Kubernetes' limits. The renderer builds manifests with these;
the operator finds (and deletes) what a plan wrote with the same functions, knowing only the plan's
namespace and name, so the two can never disagree. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re

GROUP = "gpuplan.ragnaros.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GpuAllocationPlan"
PLURAL = "gpuallocationplans"
FIELD_MANAGER = "gpuplan-operator"  # server-side apply and merge patches of the operator

DOMAIN = GROUP  # label and annotation keys: gpuplan.ragnaros.io/...
GPU_TYPE_LABEL = f"{DOMAIN}/gpu-type"  # the default resource model selects nodes by this label
PLAN_LABEL = f"{DOMAIN}/plan"  # on every namespaced object a plan writes: the plan's name
FLAMEWAKER_LABEL = f"{DOMAIN}/flamewaker"  # on a Deployment's pods: which flamewaker entry
PART_ANNOTATION = f"{DOMAIN}/part"  # "2/3" on the parts of a plan's flamewakers ConfigMap
# the scheduling gate every pod of a ``gang: plan`` plan is created with; the operator lifts it
GANG_GATE = f"{DOMAIN}/gang"
RELEASED_ANNOTATION = f"{DOMAIN}/released"  # on a pod whose gate the operator lifted: when (RFC 3339)
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuplan"}
PRIORITY_PREFIX = "ragnaros-cluster-critical-"
SEED_KEY = "ragnaros_operator_config"  # the product's own JSON configuration

# the kinds of object a plan writes (and the words metrics and events use for them)
NODE, PRIORITY_CLASS, CONFIGMAP, DEPLOYMENT, POD = "Node", "PriorityClass", "ConfigMap", "Deployment", "Pod"
CLAIM_TEMPLATE = "ResourceClaimTemplate"  # one per instance when GPUs are chosen one by one (DRA)

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def short_hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def fit(text: str, limit: int) -> str:
    """Shorten to ``limit`` characters, keeping it unique with a hash suffix."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 9].rstrip('-.')}-{short_hash(text)}"


def dns_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 name from parts: lower case, ``-`` for anything else, hashed past ``limit``."""
    text = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return fit(text, limit)


def plan_label_key(namespace: str, name: str) -> str:
    """The one node label key a plan owns: ``gpuplan.ragnaros.io/<namespace>.<name>``."""
    return f"{DOMAIN}/{fit(f'{namespace}.{name}', 63)}"


def is_plan_label_key(key: str) -> bool:
    """Plan keys carry a dot after the domain (``<namespace>.<name>``); settings have none."""
    prefix = f"{DOMAIN}/"
    return key.startswith(prefix) and "." in key[len(prefix) :]


def plan_label_namespace(key: str) -> str | None:
    """The namespace a plan label key names (namespaces have no dots: the part before the first
    one); None when the key is not a plan's."""
    if not is_plan_label_key(key):
        return None
    return key[len(DOMAIN) + 1 :].split(".", 1)[0]


def node_token(node: str) -> str:
    """The plan label's value on a node: the node's name, or a hash when it is no label value."""
    return node if len(node) <= 63 and _LABEL_VALUE.match(node) else f"node-{short_hash(node, 16)}"


def plan_labels(name: str) -> dict[str, str]:
    """Labels on every namespaced object the plan ``name`` writes (and on its pods)."""
    return MANAGED_BY | {PLAN_LABEL: fit(name, 63)}


def configmap_name(plan: str, part: int = 1) -> str:
    """The plan's flamewakers ConfigMap (``part`` 2, 3, ... only for plans too large for one)."""
    return dns_name(plan, "flamewakers", *([str(part)] if part > 1 else []), limit=253)


def priority_class_name(units: int, priority: int = 0) -> str:
    """``ragnaros-cluster-critical-8`` at plan priority 0; ``ragnaros-cluster-critical-p500-8`` at 500."""
    return f"{PRIORITY_PREFIX}{units}" if priority == 0 else f"{PRIORITY_PREFIX}p{priority}-{units}"


PRIORITY_BASE = 800_000_000  # the value of the classes is base + cards·1000 (user classes stay below 1e9)
# one plan priority step is worth more than any instance size: cards rank inside a priority only.
# 1000 steps of 199,000 above the default base stay below 1,000,000,000, the system classes' floor.
PRIORITY_STEP = 199_000
RANKED_UNITS = 198  # instances larger than this (no GPU node has that many) rank as this size


def priority_value(units: int, base: int = PRIORITY_BASE, priority: int = 0) -> int:
    """800008000 for 8 cards, 800007000 for 7, ...: a larger instance schedules, and preempts, first.

    A plan's priority comes before its sizes: every class of priority ``p + 1`` is above every
    class of priority ``p`` (``base + p·199000 + cards·1000``, cards capped at 198)."""
    return base + priority * PRIORITY_STEP + min(units, RANKED_UNITS) * 1000

"""gpuplan's pure planning library, and its one public face.

No I/O happens in this package: the command line (:mod:`gpuplan`) reads files and clusters, the
operator (:mod:`gpuplan_operator`) reads and writes the cluster. Everything here takes a frozen
snapshot of nodes, free cards and requests and returns values that carry their reasons, so the
operator and the command line render exactly the same plan from the same input.

The folder shows the roles, bottom to top (the import contracts in ``pyproject.toml`` hold them):

- ``base``: words every layer shares (API names and label keys, the strategy table, typed codes,
  the input error, Kubernetes quantities); depends on nothing else here.
- ``model``: the plan spec and the cluster snapshot, the options each request has, devices and
  NUMA zones, the result value.
- ``read``: readers of outside documents (plan manifests, node, pod, slice, claim and topology
  lists, allocations written earlier) into the model, each error naming the field.
- ``search``: choosing splits and nodes: node classes, the greedy placement, the CP-SAT models.
- ``node``: placement inside a node: devices and domains, NUMA zones, pods' CPU.
- ``output``: what goes out: the rendered objects and values.yaml, the explanation, the picture
  of every node's cards (a view model, and the HTML page drawn from it).
- ``planning``: the entry that plans one spec on one snapshot.
- ``share``: several plans on one snapshot, by priority, with elastic ranges (``plan_together``).

The command line and the operator import only from here, never from the sub-packages. Importing
the package imports nothing else (``gpuplan --help`` should not pay for the planner): each name is
loaded from its module the first time it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.base.codes import ConflictKind
    from planner.base.errors import InvalidInput
    from planner.base.quantity import parse_quantity
    from planner.base.vocab import (
        API_VERSION,
        CLAIM_TEMPLATE,
        CONFIGMAP,
        DEPLOYMENT,
        FIELD_MANAGER,
        GANG_GATE,
        GROUP,
        KIND,
        MANAGED_BY,
        NODE,
        PART_ANNOTATION,
        PLAN_LABEL,
        PLURAL,
        POD,
        PRIORITY_BASE,
        PRIORITY_CLASS,
        RELEASED_ANNOTATION,
        VERSION,
        configmap_name,
        is_plan_label_key,
        plan_label_key,
        plan_label_namespace,
        plan_labels,
    )
    from planner.model.result import Allocation, PlanResult, Previous, previous_placements
    from planner.model.spec import Gang, PlanSpec, Snapshot
    from planner.output.explain import explain, why_not
    from planner.output.page import render_page
    from planner.output.render import Desired, render_desired, render_key, render_manifests, values_yaml
    from planner.output.view import Shown, View, build_view, shown_result, shown_status
    from planner.planning import plan
    from planner.read.allocations import read_allocations
    from planner.read.parse import parse_plan, parse_spec, pod_requests, snapshot
    from planner.share.outcome import Admission, BelowMax, Grant, Shared
    from planner.share.together import plan_together

_HOMES = {
    "planner.base.codes": ("ConflictKind",),
    "planner.base.errors": ("InvalidInput",),
    "planner.base.quantity": ("parse_quantity",),
    "planner.base.vocab": (
        "API_VERSION",
        "CLAIM_TEMPLATE",
        "CONFIGMAP",
        "DEPLOYMENT",
        "FIELD_MANAGER",
        "GANG_GATE",
        "GROUP",
        "KIND",
        "MANAGED_BY",
        "NODE",
        "PART_ANNOTATION",
        "PLAN_LABEL",
        "PLURAL",
        "POD",
        "PRIORITY_BASE",
        "PRIORITY_CLASS",
        "RELEASED_ANNOTATION",
        "VERSION",
        "configmap_name",
        "is_plan_label_key",
        "plan_label_key",
        "plan_label_namespace",
        "plan_labels",
    ),
    "planner.model.result": ("Allocation", "PlanResult", "Previous", "previous_placements"),
    "planner.model.spec": ("Gang", "PlanSpec", "Snapshot"),
    "planner.output.explain": ("explain", "why_not"),
    "planner.output.page": ("render_page",),
    "planner.output.render": ("Desired", "render_desired", "render_key", "render_manifests", "values_yaml"),
    "planner.output.view": ("Shown", "View", "build_view", "shown_result", "shown_status"),
    "planner.planning": ("plan",),
    "planner.read.allocations": ("read_allocations",),
    "planner.read.parse": ("parse_plan", "parse_spec", "pod_requests", "snapshot"),
    "planner.share.outcome": ("Admission", "BelowMax", "Grant", "Shared"),
    "planner.share.together": ("plan_together",),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [  # the same names as _HOMES (a unit test holds them equal)
    "API_VERSION",
    "CLAIM_TEMPLATE",
    "CONFIGMAP",
    "DEPLOYMENT",
    "FIELD_MANAGER",
    "GANG_GATE",
    "GROUP",
    "KIND",
    "MANAGED_BY",
    "NODE",
    "PART_ANNOTATION",
    "PLAN_LABEL",
    "PLURAL",
    "POD",
    "PRIORITY_BASE",
    "PRIORITY_CLASS",
    "RELEASED_ANNOTATION",
    "VERSION",
    "Admission",
    "Allocation",
    "BelowMax",
    "ConflictKind",
    "Desired",
    "Gang",
    "Grant",
    "InvalidInput",
    "PlanResult",
    "PlanSpec",
    "Previous",
    "Shared",
    "Shown",
    "Snapshot",
    "View",
    "build_view",
    "configmap_name",
    "explain",
    "is_plan_label_key",
    "parse_plan",
    "parse_quantity",
    "parse_spec",
    "plan",
    "plan_label_key",
    "plan_label_namespace",
    "plan_labels",
    "plan_together",
    "pod_requests",
    "previous_placements",
    "read_allocations",
    "render_desired",
    "render_key",
    "render_manifests",
    "render_page",
    "shown_result",
    "shown_status",
    "snapshot",
    "values_yaml",
    "why_not",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value

"""gpuplan's Kubernetes operator: makes the cluster follow a GpuAllocationPlan.

Layers, one way only: :mod:`.handlers` (thin kopf handlers) call :mod:`.service` (snapshot the
cluster, call the planner, apply what the planner rendered, write status), which does its I/O
through :mod:`.cluster` (``read_*``/``list_*``/``apply_*``/``patch_*``/``delete_*``) on a
:class:`~.kube.Kube` transport. :mod:`.status`, :mod:`.diff`, :mod:`.reserve` and
:mod:`.watch` are pure and unit-tested without a cluster. Planning and rendering stay in
:mod:`planner`, so the operator writes exactly what ``gpuplan plan -o manifests`` prints, plus
``ownerReferences``.
"""

GROUP = "gpuplan.ragnaros.io"
VERSION = "v1alpha1"
PLURAL = "gpuallocationplans"
KIND = "GpuAllocationPlan"
FIELD_MANAGER = "gpuplan-operator"

"""gpuplan's Kubernetes operator: makes the cluster follow a GpuAllocationPlan.

Layers, one way only: :mod:`.handlers` (thin kopf handlers) call :mod:`.service`, which reads the
cluster through :mod:`.cluster`, calls the planner, computes the writes (:mod:`.writes`, pure),
performs them (:mod:`.apply`) and writes status (:mod:`.status`, pure). :mod:`.cluster` speaks to
the API server through a :class:`~.kube.KubeApi`. :mod:`.body`, :mod:`.diff`, :mod:`.reserve`,
:mod:`.readiness`, :mod:`.watch` and :mod:`.writes` are pure and unit-tested without a cluster.
Planning and rendering stay in :mod:`planner`, so the operator writes exactly what
``gpuplan plan -o manifests`` prints, plus ``ownerReferences``; names, keys and labels come from
:mod:`planner.base.vocab`.
"""

"""The operator's view of the cluster, kept by watches (the ``cache/`` of kube-batch and Volcano).

Notes
-----
Planning reads nodes, the pods that hold cards, DRA ResourceSlices and ResourceClaims,
NodeResourceTopologies and every plan; an apply compares with the plans' Deployments. Listing
them on each reconcile cost most of a re-plan at a
thousand nodes; here each kind is listed once and then followed by a watch (:mod:`.informer`),
kept trimmed to what the operator reads (:mod:`.trim`) in a :class:`~.store.Store`. A cycle reads
all of them at one moment with :meth:`~.cluster.ClusterCache.read`, without a request.

Each store knows whether a change matters to planning (a fingerprint per object, as the node
watch always had), so heartbeats and the operator's own label writes never start a cycle.
"""

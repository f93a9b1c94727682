"""Readers of outside documents (plan manifests, Node, Pod, ResourceSlice, ResourceClaim and
NodeResourceTopology lists, allocations written earlier) into the model; every error names the
field as the user wrote it."""

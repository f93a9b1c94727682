# shellcheck shell=bash
# Shared names of hack/kubelet-up.sh and hack/kubelet-down.sh (sourced after common.sh).
# shellcheck disable=SC2034  # variables are used by the scripts that source this file

# The real nodes' label (kwok leaves nodes that carry it alone, see control-plane.yaml) and taint.
REAL_LABEL="gpuplan.ragnaros.io/kubelet"
REAL_GPU_TYPE="L4"
REAL_DRA_GPU_TYPE="L4-DRA"
# the fake DRA kubelet plugin's driver (hack/k8s/fakedra); the kwok suites' driver is another
DRA_DRIVER="gpu.kubelet.gpuplan.test"
KUBELET_DIR="${CLUSTER_DIR}/kubelets"
# Node containers are named after the clone, so that two clones on one machine do not clash.
CLUSTER_KEY="$(printf '%s %s' "${CLUSTER_DIR}" "${CLUSTER_NAME}" | sha256sum | cut -c1-8)"
CONTAINER_LABEL="gpuplan.cluster"

container_name() { printf 'gpuplan-%s-%s' "${CLUSTER_KEY}" "$1"; }

# this clone's node containers, running or not
node_containers() {
  podman ps --all --filter "label=${CONTAINER_LABEL}=${CLUSTER_KEY}" --format '{{.Names}}' 2>/dev/null || true
}

#!/usr/bin/env bash
# Add real nodes to the local cluster: each a privileged podman container running containerd, a
# kubelet of the control plane's version and a fake GPU device plugin (hack/node/), joined to the
# API server that hack/cluster-up.sh started. The kwok nodes stay as they are; kwok leaves these
# nodes alone (it manages only nodes without the gpuplan.ragnaros.io/kubelet label).
#
# Each node, real-000 .. real-<N-1>, advertises GPUS cards of nvidia.com/gpu through the device
# plugin and DRA_GPUS other fake cards in DRA_DOMAINS PCIe roots through a DRA kubelet plugin
# (driver DRA_DRIVER: one ResourceSlice per node, claims prepared through CDI), is labelled gpuplan.ragnaros.io/gpu-type=L4 and gpuplan.ragnaros.io/kubelet=real, and is
# tainted gpuplan.ragnaros.io/kubelet=real:NoSchedule, so that only pods that tolerate it (the
# real-kubelet tests) land there and the kwok suites never see them.
#
# Pods reach each other across the nodes: each node routes the others' pod subnets to them.
#
# Idempotent: a node already running the current image is kept; nodes beyond N are removed.
# Writes <repo>/.cluster/kubelets.env (node names, the workload image) for the tests.
#
# Usage: bash hack/kubelet-up.sh N      (N = 0 removes every real node)
# Env:   KUBELET_GPUS (fake cards per node, default 4), KUBELET_DRA_GPUS (fake DRA cards per node,
#        default 4; 0 = no DRA plugin), KUBELET_DRA_DOMAINS (their PCIe roots, default 2),
#        GPUPLAN_CLUSTER_TIMEOUT (default 180)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "${HACK_DIR}/common.sh"
# shellcheck source=podman-env.sh
source "${HACK_DIR}/podman-env.sh"
# shellcheck source=kubelet-common.sh
source "${HACK_DIR}/kubelet-common.sh"

COUNT="${1:?usage: kubelet-up.sh N}"
[[ "${COUNT}" =~ ^[0-9]+$ ]] || die "N must be a number of nodes, got '${COUNT}'"
GPUS="${KUBELET_GPUS:-4}"
[[ "${GPUS}" =~ ^[0-9]+$ ]] || die "KUBELET_GPUS must be a number of cards, got '${GPUS}'"
DRA_GPUS="${KUBELET_DRA_GPUS:-4}"
DRA_DOMAINS="${KUBELET_DRA_DOMAINS:-2}"
[[ "${DRA_GPUS}" =~ ^[0-9]+$ ]] || die "KUBELET_DRA_GPUS must be a number of cards, got '${DRA_GPUS}'"
[[ "${DRA_DOMAINS}" =~ ^[1-9][0-9]*$ ]] && ((DRA_GPUS % DRA_DOMAINS == 0)) ||
  die "KUBELET_DRA_DOMAINS must split KUBELET_DRA_GPUS=${DRA_GPUS} into equal PCIe roots, got '${DRA_DOMAINS}'"
TIMEOUT="${GPUPLAN_CLUSTER_TIMEOUT:-180}"
[[ -s "${KUBECONFIG_OUT}" ]] || die "no ${KUBECONFIG_OUT}: start the cluster first (bash hack/cluster-up.sh)"
use_bin_dir "${GPUPLAN_BIN_DIR}"
kc() { kubectl --kubeconfig "${KUBECONFIG_OUT}" "$@"; }

if ((COUNT == 0)); then
  exec bash "${HACK_DIR}/kubelet-down.sh"
fi
command -v podman >/dev/null || die "podman is missing: bash hack/install-image-tools.sh"

START=${SECONDS}
eval "$(bash "${HACK_DIR}/node-image.sh")"

# The kubelets reach the API server through their container's default gateway, which is this
# host (the API server listens on every address): the node's entrypoint names it
# gpuplan-apiserver in /etc/hosts. The server's certificate names 127.0.0.1, which the kubeconfig
# keeps as the name to verify.
SERVER="$(kc config view --raw -o jsonpath='{.clusters[0].cluster.server}')"
PORT="${SERVER##*:}"
mkdir -p "${KUBELET_DIR}"
SERVER_NAME="$(sed -E 's|^https://([^:/]+).*|\1|' <<<"${SERVER}")"
kc config view --raw --flatten >"${KUBELET_DIR}/kubeconfig.tmp"
kubectl --kubeconfig "${KUBELET_DIR}/kubeconfig.tmp" config set-cluster \
  "$(kc config view -o jsonpath='{.clusters[0].name}')" \
  --server "https://gpuplan-apiserver:${PORT}" --tls-server-name "${SERVER_NAME}" >/dev/null
chmod 600 "${KUBELET_DIR}/kubeconfig.tmp"
mv -f "${KUBELET_DIR}/kubeconfig.tmp" "${KUBELET_DIR}/kubeconfig"

LABELS="${REAL_LABEL}=real,gpuplan.ragnaros.io/gpu-type=${REAL_GPU_TYPE},nvidia.com/gpu.product=fake-${REAL_GPU_TYPE},nvidia.com/gpu.count=${GPUS}"
TAINTS="${REAL_LABEL}=real:NoSchedule"

# Nodes beyond COUNT (an earlier, larger N) go.
for c in $(node_containers); do
  i="${c##*-real-}"
  if ((10#${i} >= COUNT)); then
    log "removing node real-${i}"
    podman rm -f -v --time 5 "${c}" >/dev/null
    kc delete node "real-${i}" --ignore-not-found >/dev/null
  fi
done

# What a running node must match to be kept: its cards, the API server it joined (a recreated
# cluster listens on another port) and the images its containerd imported when it started.
NODE_KEY="gpus=${GPUS},dra=${DRA_GPUS}/${DRA_DOMAINS},port=${PORT},images=${IMAGES_DIR##*/}"
# podman leaves a monitor process (conmon) beside each container for the container's whole life,
# and it inherits every open descriptor but 0-2: a caller's lock (cluster-up.sh holds one) or pipe
# would stay open as long as the node runs. Close them first.
podman_run() {
  (
    for fd in /proc/"${BASHPID}"/fd/*; do
      fd="${fd##*/}"
      if ((fd > 2)); then eval "exec ${fd}>&-" 2>/dev/null || true; fi
    done
    exec podman run "$@"
  )
}

NODES=()
for ((i = 0; i < COUNT; i++)); do
  name="$(printf 'real-%03d' "${i}")"
  NODES+=("${name}")
  container="$(container_name "${name}")"
  if [[ "$(podman inspect --format '{{.State.Running}} {{.ImageName}} {{index .Config.Labels "gpuplan.node"}}' "${container}" 2>/dev/null)" == "true ${NODE_IMAGE} ${NODE_KEY}" ]]; then
    log "node ${name} is running ${NODE_IMAGE}"
    continue
  fi
  podman rm -f -v --time 5 "${container}" >/dev/null 2>&1 || true
  # A node that ran another image re-registers from scratch.
  kc delete node "${name}" --ignore-not-found >/dev/null
  log "starting node ${name} (${GPUS} fake GPUs)"
  podman_run --detach --quiet --privileged --cgroupns=private \
    --name "${container}" --hostname "${name}" \
    --label "${CONTAINER_LABEL}=${CLUSTER_KEY}" --label "gpuplan.node=${NODE_KEY}" \
    --env NODE_NAME="${name}" --env POD_CIDR="10.244.$((i + 1)).0/24" --env GPUS="${GPUS}" \
    --env DRA_GPUS="${DRA_GPUS}" --env DRA_DOMAINS="${DRA_DOMAINS}" --env DRA_DRIVER="${DRA_DRIVER}" \
    --env PAUSE_IMAGE="${PAUSE_IMAGE}" --env NODE_LABELS="${LABELS}" --env NODE_TAINTS="${TAINTS}" \
    --volume "${KUBELET_DIR}/kubeconfig:/etc/kubernetes/kubeconfig:ro" \
    --volume "${IMAGES_DIR}:/images:ro" \
    --volume /var/lib/containerd --volume /var/lib/kubelet \
    "${NODE_IMAGE}" >/dev/null
done

# Ready, and the device plugin's cards counted in allocatable.
nodes_ready() {
  local name want got
  for name in "${NODES[@]}"; do
    got="$(kc get node "${name}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}' 2>/dev/null)" || return 1
    want="True"
    ((GPUS > 0)) && want="True ${GPUS}"
    [[ "${got% }" == "${want}" ]] || return 1
    ((DRA_GPUS > 0)) || continue
    # the DRA plugin's slice of this node, with all its devices
    got="$(kc get resourceslices --field-selector "spec.nodeName=${name},spec.driver=${DRA_DRIVER}" \
      -o jsonpath='{range .items[*]}{range .spec.devices[*]}{.name}{" "}{end}{end}' 2>/dev/null)" || return 1
    [[ "$(wc -w <<<"${got}")" == "${DRA_GPUS}" ]] || return 1
  done
}
containers_alive() {
  local name
  for name in "${NODES[@]}"; do
    [[ "$(podman inspect --format '{{.State.Running}}' "$(container_name "${name}")" 2>/dev/null)" == true ]] || {
      log "node container of ${name} stopped; its log:"
      podman logs --tail 30 "$(container_name "${name}")" >&2 || true
      return 1
    }
  done
}
ready_or_dead() { containers_alive || exit 1; nodes_ready; }
poll "${TIMEOUT}" "${COUNT} real nodes to be Ready with ${GPUS} nvidia.com/gpu and ${DRA_GPUS} DRA devices each" ready_or_dead ||
  die "real nodes not Ready after ${TIMEOUT}s; see: podman exec $(container_name real-000) tail /var/log/kubelet.log"

# A pod network across the nodes, as a host-gw CNI would make it: each node routes every other
# node's pod subnet to that node's container address (they share podman's bridge), so a load
# tester on one node reaches a service's pods on all of them. Set again on every run (a node
# container that was replaced has a new address).
declare -A NODE_ADDR
for ((i = 0; i < COUNT; i++)); do
  NODE_ADDR[${i}]="$(podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(container_name "${NODES[i]}")")"
  [[ -n "${NODE_ADDR[${i}]}" ]] || die "no address for the container of ${NODES[i]}"
done
for ((i = 0; i < COUNT; i++)); do
  for ((j = 0; j < COUNT; j++)); do
    ((i == j)) && continue
    podman exec "$(container_name "${NODES[i]}")" ip route replace "10.244.$((j + 1)).0/24" via "${NODE_ADDR[${j}]}"
  done
done

{
  printf 'KUBELET_NODES="%s"\n' "${NODES[*]}"
  printf 'KUBELET_GPUS=%s\n' "${GPUS}"
  printf 'KUBELET_GPU_TYPE=%s\n' "${REAL_GPU_TYPE}"
  printf 'KUBELET_DRA_DRIVER=%s\n' "${DRA_DRIVER}"
  printf 'KUBELET_DRA_GPUS=%s\n' "${DRA_GPUS}"
  printf 'KUBELET_DRA_DOMAINS=%s\n' "${DRA_DOMAINS}"
  printf 'WORKLOAD_IMAGE=%s\n' "${WORKLOAD_IMAGE}"
  printf 'PAUSE_IMAGE=%s\n' "${PAUSE_IMAGE}"
} >"${KUBELET_DIR}/kubelets.env"
log "${COUNT} real nodes Ready in $((SECONDS - START))s: ${NODES[*]} (${GPUS} fake GPUs each; workload image ${WORKLOAD_IMAGE})"

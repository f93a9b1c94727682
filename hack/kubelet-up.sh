#!/usr/bin/env bash
# Add real nodes to the local cluster: each a privileged podman container running containerd, a
# kubelet of the control plane's version and a fake GPU device plugin (hack/node/), joined to the
# API server that hack/cluster-up.sh started. The kwok nodes stay as they are; kwok leaves these
# nodes alone (it manages only nodes without the gpuplan.ragnaros.io/kubelet label).
#
# Each node, real-000 .. real-<N-1>, advertises GPUS cards of nvidia.com/gpu through the device
# plugin and is labelled gpuplan.ragnaros.io/gpu-type=L4. Each DRA node, real-dra-000 ..
# real-dra-<DRA_NODES-1>, publishes DRA_GPUS fake cards in DRA_DOMAINS PCIe roots through a DRA
# kubelet plugin (hack/k8s/fakedra, driver gpu.kubelet.gpuplan.test: one ResourceSlice per node,
# claims prepared through CDI) and is labelled gpuplan.ragnaros.io/gpu-type=L4-DRA: the planner
# plans a node whose cards are published one by one through claims, so the device-plugin plans
# stay off it. All carry gpuplan.ragnaros.io/kubelet=real and are tainted
# gpuplan.ragnaros.io/kubelet=real:NoSchedule, so that only pods that tolerate it (the
# real-kubelet tests) land there and the kwok suites never see them.
#
# Pods reach each other across the nodes: each node routes the others' pod subnets to them.
#
# Idempotent: a node already running the current image is kept; nodes not asked for are removed.
# Writes <repo>/.cluster/kubelets/kubelets.env (node names, cards, the workload image) for the tests.
#
# Usage: bash hack/kubelet-up.sh N      (N = 0 removes every real node)
# Env:   KUBELET_GPUS (fake cards per node, default 4), KUBELET_DRA_NODES (DRA nodes, default 0),
#        KUBELET_DRA_GPUS (fake cards per DRA node, default 8), KUBELET_DRA_DOMAINS (their PCIe
#        roots, default 2), GPUPLAN_CLUSTER_TIMEOUT (default 180)
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
DRA_NODES="${KUBELET_DRA_NODES:-0}"
[[ "${DRA_NODES}" =~ ^[0-9]+$ ]] || die "KUBELET_DRA_NODES must be a number of nodes, got '${DRA_NODES}'"
DRA_GPUS="${KUBELET_DRA_GPUS:-8}"
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

TAINTS="${REAL_LABEL}=real:NoSchedule"

# The nodes: N device-plugin nodes real-000.., then DRA_NODES DRA nodes real-dra-000.. . A node
# whose cards are published one by one is planned through claims, so a node is one or the other
# (as in a real cluster): the DRA nodes carry their own gpu-type. Each has its pod subnet.
# name -> "gpus dra_gpus gpu-type subnet"
NODES=()
DRA_NODE_NAMES=()
declare -A NODE_SPEC
for ((i = 0; i < COUNT; i++)); do
  name="$(printf 'real-%03d' "${i}")"
  NODES+=("${name}")
  NODE_SPEC[${name}]="${GPUS} 0 ${REAL_GPU_TYPE} 10.244.$((i + 1)).0/24"
done
for ((i = 0; i < DRA_NODES; i++)); do
  name="$(printf 'real-dra-%03d' "${i}")"
  DRA_NODE_NAMES+=("${name}")
  # its nvidia.com/gpu count matches its DRA cards, as on the kwok suites' DRA nodes
  NODE_SPEC[${name}]="${DRA_GPUS} ${DRA_GPUS} ${REAL_DRA_GPU_TYPE} 10.244.$((i + 101)).0/24"
done
ALL_NODES=("${NODES[@]}" "${DRA_NODE_NAMES[@]}")

# Node containers of this clone that are not wanted (an earlier, larger N) go.
for c in $(node_containers); do
  name="${c#"$(container_name "")"}"
  if [[ -z "${NODE_SPEC[${name}]:-}" ]]; then
    log "removing node ${name}"
    podman rm -f -v --time 5 "${c}" >/dev/null
    kc delete node "${name}" --ignore-not-found >/dev/null
  fi
done

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

for name in "${ALL_NODES[@]}"; do
  read -r gpus dra_gpus gpu_type subnet <<<"${NODE_SPEC[${name}]}"
  # What a running node must match to be kept: its cards, the API server it joined (a recreated
  # cluster listens on another port) and the images its containerd imported when it started.
  key="gpus=${gpus},dra=${dra_gpus}/${DRA_DOMAINS},port=${PORT},images=${IMAGES_DIR##*/}"
  container="$(container_name "${name}")"
  if [[ "$(podman inspect --format '{{.State.Running}} {{.ImageName}} {{index .Config.Labels "gpuplan.node"}}' "${container}" 2>/dev/null)" == "true ${NODE_IMAGE} ${key}" ]]; then
    log "node ${name} is running ${NODE_IMAGE}"
    continue
  fi
  podman rm -f -v --time 5 "${container}" >/dev/null 2>&1 || true
  # A node that ran another image re-registers from scratch.
  kc delete node "${name}" --ignore-not-found >/dev/null
  log "starting node ${name} (${gpus} fake GPUs, ${dra_gpus} of them through DRA)"
  labels="${REAL_LABEL}=real,gpuplan.ragnaros.io/gpu-type=${gpu_type},nvidia.com/gpu.product=fake-${gpu_type},nvidia.com/gpu.count=${gpus}"
  podman_run --detach --quiet --privileged --cgroupns=private \
    --name "${container}" --hostname "${name}" \
    --label "${CONTAINER_LABEL}=${CLUSTER_KEY}" --label "gpuplan.node=${key}" \
    --env NODE_NAME="${name}" --env POD_CIDR="${subnet}" --env GPUS="${gpus}" \
    --env DRA_GPUS="${dra_gpus}" --env DRA_DOMAINS="${DRA_DOMAINS}" --env DRA_DRIVER="${DRA_DRIVER}" \
    --env DRA_PRODUCT="fake-${gpu_type}" \
    --env PAUSE_IMAGE="${PAUSE_IMAGE}" --env NODE_LABELS="${labels}" --env NODE_TAINTS="${TAINTS}" \
    --volume "${KUBELET_DIR}/kubeconfig:/etc/kubernetes/kubeconfig:ro" \
    --volume "${IMAGES_DIR}:/images:ro" \
    --volume /var/lib/containerd --volume /var/lib/kubelet \
    "${NODE_IMAGE}" >/dev/null
done

# Ready, the device plugin's cards counted in allocatable, and a DRA node's slice published.
nodes_ready() {
  local name want got gpus dra_gpus
  for name in "${ALL_NODES[@]}"; do
    read -r gpus dra_gpus _ <<<"${NODE_SPEC[${name}]}"
    got="$(kc get node "${name}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}' 2>/dev/null)" || return 1
    want="True"
    ((gpus > 0)) && want="True ${gpus}"
    [[ "${got% }" == "${want}" ]] || return 1
    ((dra_gpus > 0)) || continue
    got="$(kc get resourceslices --field-selector "spec.nodeName=${name},spec.driver=${DRA_DRIVER}" \
      -o jsonpath='{range .items[*]}{range .spec.devices[*]}{.name}{" "}{end}{end}' 2>/dev/null)" || return 1
    [[ "$(wc -w <<<"${got}")" == "${dra_gpus}" ]] || return 1
  done
}
containers_alive() {
  local name
  for name in "${ALL_NODES[@]}"; do
    [[ "$(podman inspect --format '{{.State.Running}}' "$(container_name "${name}")" 2>/dev/null)" == true ]] || {
      log "node container of ${name} stopped; its log:"
      podman logs --tail 30 "$(container_name "${name}")" >&2 || true
      return 1
    }
  done
}
ready_or_dead() { containers_alive || exit 1; nodes_ready; }
poll "${TIMEOUT}" "${COUNT} real nodes with ${GPUS} nvidia.com/gpu and ${DRA_NODES} with ${DRA_GPUS} DRA devices to be Ready" ready_or_dead ||
  die "real nodes not Ready after ${TIMEOUT}s; see: podman exec $(container_name real-000) tail /var/log/kubelet.log"

# A pod network across the nodes, as a host-gw CNI would make it: each node routes every other
# node's pod subnet to that node's container address (they share podman's bridge), so a load
# tester on one node reaches a service's pods on all of them. Set again on every run (a node
# container that was replaced has a new address).
declare -A NODE_ADDR
for name in "${ALL_NODES[@]}"; do
  NODE_ADDR[${name}]="$(podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(container_name "${name}")")"
  [[ -n "${NODE_ADDR[${name}]}" ]] || die "no address for the container of ${name}"
done
for name in "${ALL_NODES[@]}"; do
  for other in "${ALL_NODES[@]}"; do
    [[ "${name}" == "${other}" ]] && continue
    read -r _ _ _ subnet <<<"${NODE_SPEC[${other}]}"
    podman exec "$(container_name "${name}")" ip route replace "${subnet}" via "${NODE_ADDR[${other}]}"
  done
done

{
  printf 'KUBELET_NODES="%s"\n' "${NODES[*]}"
  printf 'KUBELET_GPUS=%s\n' "${GPUS}"
  printf 'KUBELET_GPU_TYPE=%s\n' "${REAL_GPU_TYPE}"
  printf 'KUBELET_DRA_NODES="%s"\n' "${DRA_NODE_NAMES[*]}"
  printf 'KUBELET_DRA_GPU_TYPE=%s\n' "${REAL_DRA_GPU_TYPE}"
  printf 'KUBELET_DRA_DRIVER=%s\n' "${DRA_DRIVER}"
  printf 'KUBELET_DRA_GPUS=%s\n' "${DRA_GPUS}"
  printf 'KUBELET_DRA_DOMAINS=%s\n' "${DRA_DOMAINS}"
  printf 'WORKLOAD_IMAGE=%s\n' "${WORKLOAD_IMAGE}"
  printf 'PAUSE_IMAGE=%s\n' "${PAUSE_IMAGE}"
} >"${KUBELET_DIR}/kubelets.env"
DRA_NOTE=""
((DRA_NODES > 0)) && DRA_NOTE=", ${DRA_GPUS} through DRA on each real-dra node"
log "real nodes Ready in $((SECONDS - START))s: ${ALL_NODES[*]} (${GPUS} fake GPUs each through the device plugin${DRA_NOTE}; workload image ${WORKLOAD_IMAGE})"

#!/usr/bin/env bash
# The cluster of `make demo CLUSTER=kind`: create (or reuse) the kind cluster of
# hack/kind/cluster.yaml, wait for its nodes, advertise their fake GPUs (hack/kind/gpu-nodes.sh).
# Prints the kubeconfig path (.cluster/kind-kubeconfig; ~/.kube/config is not touched).
#
# With Docker: kind's own node image. Without (or with KIND_EXPERIMENTAL_PROVIDER=podman): podman
# runs the nodes, from a node image made here from the local harness's binaries
# (hack/kind/node-image.sh; nothing from a registry), see hack/kind/env.sh and hack/kind/README.md.
# kind on PATH or built (hack/kind/install-kind.sh); kubectl on PATH or the harness's.
#
# Usage: bash hack/kind/up.sh        Stop: make cluster-down CLUSTER=kind
set -euo pipefail

KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${KIND_DIR}/../.." && pwd)"
CONFIG="${KIND_DIR}/cluster.yaml"
NAME="$(awk '$1 == "name:" {print $2; exit}' "${CONFIG}")"
KUBECONFIG_KIND="${REPO_ROOT}/.cluster/kind-kubeconfig"

log() { printf '[kind-up %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# raise_sysctl <key> <value>: raise a kernel setting to at least <value> (root only; else a warning)
raise_sysctl() {
  local now
  now="$(sysctl -n "$1" 2>/dev/null)" || return 0
  ((now >= $2)) && return 0
  if sysctl -q -w "$1=$2" >/dev/null 2>&1; then
    log "raised $1 from ${now} to $2"
  else
    log "WARNING: $1 is ${now}; kind's nodes may need $2 (sysctl -w $1=$2 as root)"
  fi
}

# shellcheck source=env.sh
source "${KIND_DIR}/env.sh"
kind_use_harness_kubectl
command -v kubectl >/dev/null || die "no kubectl on PATH (bash hack/build-binaries.sh builds one)"
mkdir -p "${REPO_ROOT}/.cluster"

if "${KIND}" get clusters 2>/dev/null | grep -qx "${NAME}"; then
  log "kind cluster ${NAME} exists; reusing it"
  "${KIND}" get kubeconfig --name "${NAME}" >"${KUBECONFIG_KIND}"
else
  IMAGE="$(kind_node_image)"
  [[ "${KIND_EXPERIMENTAL_PROVIDER:-}" != podman ]] || kind_podman_network
  # kind mounts the host's /lib/modules into every node; a machine without one gets an empty one
  [[ -d /lib/modules ]] || { log "creating an empty /lib/modules (kind mounts it into its nodes)"; mkdir -p /lib/modules; }
  # Every node's kubelet, containerd and systemd take inotify instances of the host's root user,
  # 128 by default: with the real-kubelet nodes up too, two kind workers' kubelets failed with
  # "unable to create inotify: too many open files" and never registered. kind's known-issues
  # page gives these values.
  raise_sysctl fs.inotify.max_user_instances 512
  raise_sysctl fs.inotify.max_user_watches 524288
  log "creating kind cluster ${NAME} (1 control plane + 7 workers; a few minutes the first time)${IMAGE:+ from ${IMAGE}}"
  "${KIND}" create cluster --config "${CONFIG}" --kubeconfig "${KUBECONFIG_KIND}" --wait 180s ${IMAGE:+--image "${IMAGE}"} >&2
fi
chmod 600 "${KUBECONFIG_KIND}"
export KUBECONFIG="${KUBECONFIG_KIND}"
# kind waits for the control plane only; `wait nodes --all` covers only the nodes registered so far
want="$(grep -c '^- role:' "${CONFIG}")"
for _ in $(seq 180); do
  [[ "$(kubectl get nodes --no-headers 2>/dev/null | wc -l)" -ge "${want}" ]] && break
  sleep 1
done
have="$(kubectl get nodes --no-headers 2>/dev/null | wc -l)"
[[ "${have}" -ge "${want}" ]] ||
  die "${have} of the ${want} nodes of ${CONFIG} registered in 180 s; a node's kubelet log: podman exec <node> journalctl -u kubelet"
kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null

# Pod traffic between the nodes of a node image made here (hack/kind/node-image.sh): each node has
# a bridge of its own (/kind/bin/kind-bridge-cni: 10.244.<last byte of its address>.0/24) and no
# kindnetd to route between them. Every node routes the others' pod subnets to them, as a host-gw
# CNI would; set again on every run (a restarted node may have another address).
ENGINE="${KIND_EXPERIMENTAL_PROVIDER:-docker}"
if "${ENGINE}" exec "${NAME}-control-plane" test -x /kind/bin/kind-bridge-cni 2>/dev/null; then
  mapfile -t NODE_ADDRS < <(kubectl get nodes \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  for row in "${NODE_ADDRS[@]}"; do
    read -r node addr <<<"${row}"
    routes=""
    for other in "${NODE_ADDRS[@]}"; do
      read -r other_node other_addr <<<"${other}"
      [[ "${other_node}" == "${node}" ]] && continue
      routes+="ip route replace 10.244.${other_addr##*.}.0/24 via ${other_addr}; "
    done
    "${ENGINE}" exec "${node}" sh -c "${routes}" || die "routing the other nodes' pods from ${node} (${addr}) failed"
  done
  log "pod subnets routed between the ${#NODE_ADDRS[@]} nodes"
fi
bash "${KIND_DIR}/gpu-nodes.sh"
kubectl get nodes -L gpuplan.ragnaros.io/gpu-type -o custom-columns='NODE:.metadata.name,TYPE:.metadata.labels.gpuplan\.ragnaros\.io/gpu-type,GPUS:.status.allocatable.nvidia\.com/gpu' >&2
echo "${KUBECONFIG_KIND}"

#!/usr/bin/env bash
# The cluster of `make demo CLUSTER=kind`: create (or reuse) the kind cluster of
# hack/kind/cluster.yaml, wait for its nodes, advertise their fake GPUs (hack/kind/gpu-nodes.sh).
# Prints the kubeconfig path (.cluster/kind-kubeconfig; ~/.kube/config is not touched).
# Needs Docker (or podman with KIND_EXPERIMENTAL_PROVIDER=podman), kind and kubectl on PATH.
# Not exercised by CI: kind cannot create clusters on the CI machines (its node image comes from
# a registry they cannot reach); the tests check the config with kind itself and the node patches
# on the local harness (e2e/test_kind.py).
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

for tool in kind kubectl; do
  command -v "${tool}" >/dev/null || die "${tool} is not on PATH (kind: https://kind.sigs.k8s.io/docs/user/quick-start/)"
done
mkdir -p "${REPO_ROOT}/.cluster"

if kind get clusters 2>/dev/null | grep -qx "${NAME}"; then
  log "kind cluster ${NAME} exists; reusing it"
  kind get kubeconfig --name "${NAME}" >"${KUBECONFIG_KIND}"
else
  log "creating kind cluster ${NAME} (1 control plane + 7 workers; a few minutes the first time)"
  kind create cluster --config "${CONFIG}" --kubeconfig "${KUBECONFIG_KIND}" --wait 180s >&2
fi
chmod 600 "${KUBECONFIG_KIND}"
export KUBECONFIG="${KUBECONFIG_KIND}"
kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
bash "${KIND_DIR}/gpu-nodes.sh"
kubectl get nodes -L gpuplan.ragnaros.io/gpu-type -o custom-columns='NODE:.metadata.name,TYPE:.metadata.labels.gpuplan\.ragnaros\.io/gpu-type,GPUS:.status.allocatable.nvidia\.com/gpu' >&2
echo "${KUBECONFIG_KIND}"

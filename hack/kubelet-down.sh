#!/usr/bin/env bash
# Remove this clone's real-kubelet nodes (hack/kubelet-up.sh): their containers with their
# volumes, and their Node objects when the API server is up. Safe to run when there are none.
#
# Usage: bash hack/kubelet-down.sh
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "${HACK_DIR}/common.sh"
# shellcheck source=kubelet-common.sh
source "${HACK_DIR}/kubelet-common.sh"

if command -v podman >/dev/null; then
  # shellcheck source=podman-env.sh
  source "${HACK_DIR}/podman-env.sh"
  for c in $(node_containers); do
    log "removing node container ${c}"
    podman rm -f -v --time 5 "${c}" >/dev/null || log "could not remove ${c}"
  done
fi
if [[ -s "${KUBECONFIG_OUT}" && -x "${GPUPLAN_BIN_DIR}/kubectl" ]]; then
  "${GPUPLAN_BIN_DIR}/kubectl" --kubeconfig "${KUBECONFIG_OUT}" --request-timeout=10s \
    delete nodes -l "${REAL_LABEL}" --ignore-not-found >/dev/null 2>&1 || true
fi
rm -rf "${KUBELET_DIR}"

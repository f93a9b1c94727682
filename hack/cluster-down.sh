#!/usr/bin/env bash
# Stop the local control plane started by hack/cluster-up.sh (and its real-kubelet nodes) and
# delete its state
# (<repo>/.cluster/kwok/clusters/<name> and <repo>/.cluster/kubeconfig). Cached binaries stay.
# Safe to run when no cluster exists.
#
# Usage: bash hack/cluster-down.sh
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "${HACK_DIR}/common.sh"

STATE_DIR="${KWOK_WORKDIR}/clusters/${CLUSTER_NAME}"

# Fallback when kwokctl is unavailable or fails: stop what the pid files name, if it still runs
# a binary of this cluster (guards against recycled pids).
kill_from_pidfiles() {
  local f pid exe
  [[ -d "${STATE_DIR}/pids" ]] || return 0
  for f in "${STATE_DIR}"/pids/*.pid; do
    [[ -e "${f}" ]] || continue
    pid="$(tr -dc '0-9' <"${f}")"
    [[ -n "${pid}" ]] || continue
    exe="$(readlink "/proc/${pid}/exe" 2>/dev/null || true)"
    if [[ -n "${exe}" ]] && tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -q "${STATE_DIR}"; then
      log "stopping $(basename "${f}" .pid) (pid ${pid})"
      kill "${pid}" 2>/dev/null || true
    fi
  done
}

# The real-kubelet nodes first, while the API server can still delete their Node objects.
bash "${HACK_DIR}/kubelet-down.sh" || log "removing the real-kubelet nodes failed"

if [[ -d "${STATE_DIR}" ]]; then
  if [[ -x "${GPUPLAN_BIN_DIR}/kwokctl" ]]; then
    use_bin_dir "${GPUPLAN_BIN_DIR}"
    log "deleting cluster '${CLUSTER_NAME}'"
    kwokctl --v=WARN delete cluster --name "${CLUSTER_NAME}" || log "kwokctl delete cluster failed; cleaning up by hand"
  fi
  kill_from_pidfiles
  rm -rf "${STATE_DIR}"
else
  log "no cluster '${CLUSTER_NAME}' under ${KWOK_WORKDIR}"
fi
rm -f "${KUBECONFIG_OUT}"
rmdir "${KWOK_WORKDIR}/clusters" "${KWOK_WORKDIR}" 2>/dev/null || true
log "cluster '${CLUSTER_NAME}' is down"

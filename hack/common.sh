# shellcheck shell=bash
# Shared helpers of hack/cluster-up.sh, hack/cluster-down.sh and hack/smoke.sh (sourced).
# shellcheck disable=SC2034  # variables are used by the scripts that source this file

COMMON_HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "${COMMON_HACK_DIR}/versions.sh"

REPO_ROOT="$(cd "${COMMON_HACK_DIR}/.." && pwd)"
CLUSTER_DIR="${REPO_ROOT}/.cluster"
CLUSTER_NAME="${GPUPLAN_CLUSTER_NAME:-gpuplan}"
KUBECONFIG_OUT="${CLUSTER_DIR}/kubeconfig"
# kwokctl keeps clusters, pki, logs and pids under $KWOK_WORKDIR/clusters/<name>; one per clone.
export KWOK_WORKDIR="${CLUSTER_DIR}/kwok"

SCRIPT_NAME="$(basename "$0" .sh)"
log() { printf '[%s %s] %s\n' "${SCRIPT_NAME}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# use_bin_dir <dir>: put our kubectl/kwokctl first on PATH (kwokctl looks kubectl up on PATH and
# would otherwise download one; the machine's /usr/bin/kubectl is an older version).
use_bin_dir() {
  local dir="$1" b
  for b in kubectl kwokctl kwok; do
    [[ -x "${dir}/${b}" ]] || die "${dir}/${b} is missing; run: bash hack/build-binaries.sh"
  done
  export PATH="${dir}:${PATH}"
}

# poll <timeout seconds> <what> <command...>: run the command every second until it succeeds.
poll() {
  local timeout="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + timeout)) announced=0
  until "$@"; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for ${what}"
      return 1
    fi
    if ((announced == 0)); then
      log "waiting for ${what} (up to ${timeout}s) ..."
      announced=1
    fi
    sleep 1
  done
}

# Names and GPU counts of the sample GPU nodes ("<name> <gpus>" per line).
sample_gpu_nodes() {
  awk '/^kind: Node/ {n=""} /^  name: / && n=="" {n=$2} /^    nvidia.com\/gpu: / && n!="" {gsub(/"/,"",$2); if (!seen[n]++) print n, $2}' \
    "${COMMON_HACK_DIR}/sample-nodes.yaml"
}

sample_node_count() { grep -c '^kind: Node' "${COMMON_HACK_DIR}/sample-nodes.yaml"; }

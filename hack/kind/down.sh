#!/usr/bin/env bash
# Delete the kind cluster of `make demo CLUSTER=kind` (and its kubeconfig). Safe when none exists.
set -euo pipefail
KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${KIND_DIR}/../.." && pwd)"
NAME="$(awk '$1 == "name:" {print $2; exit}' "${KIND_DIR}/cluster.yaml")"
log() { printf '[kind-down %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=env.sh
source "${KIND_DIR}/env.sh"
if "${KIND}" get clusters 2>/dev/null | grep -qx "${NAME}"; then
  "${KIND}" delete cluster --name "${NAME}"
fi
rm -f "${REPO_ROOT}/.cluster/kind-kubeconfig"

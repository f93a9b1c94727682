#!/usr/bin/env bash
# Delete the kind cluster of `make demo CLUSTER=kind` (and its kubeconfig). Safe when none exists.
set -euo pipefail
KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${KIND_DIR}/../.." && pwd)"
NAME="$(awk '$1 == "name:" {print $2; exit}' "${KIND_DIR}/cluster.yaml")"
if command -v kind >/dev/null && kind get clusters 2>/dev/null | grep -qx "${NAME}"; then
  kind delete cluster --name "${NAME}"
fi
rm -f "${REPO_ROOT}/.cluster/kind-kubeconfig"

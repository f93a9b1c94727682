#!/usr/bin/env bash
# Build (once) and cache the kind binary from the Go module proxy; print its path on stdout. The
# tests use it to have kind itself parse and validate hack/kind/cluster.yaml; `make demo
# CLUSTER=kind` uses the kind on PATH, else this one (hack/kind/env.sh).
#
# The binary lands in ${GPUPLAN_CACHE:-$HOME/.cache/gpuplan}/kind-<version>/kind.
# Usage: bash hack/kind/install-kind.sh
# Environment: GPUPLAN_KIND_VERSION (default below), GPUPLAN_CACHE, and Go's own (GOPROXY, ...).
set -euo pipefail

KIND_VERSION="${GPUPLAN_KIND_VERSION:-v0.30.0}"
CACHE="${GPUPLAN_CACHE:-${HOME}/.cache/gpuplan}"
DEST_DIR="${CACHE}/kind-${KIND_VERSION}"
KIND="${DEST_DIR}/kind"

log() { printf '[install-kind %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cached() { [[ -x "${KIND}" ]] && "${KIND}" version 2>/dev/null | grep -q "kind ${KIND_VERSION} "; }
if cached; then
  echo "${KIND}"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go is not on PATH"
mkdir -p "${DEST_DIR}"
exec 9>"${DEST_DIR}/.lock"
flock 9
if cached; then
  echo "${KIND}"
  exit 0
fi
WORK="$(mktemp -d "${DEST_DIR}/.build-XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
log "building kind ${KIND_VERSION} with $(go env GOVERSION) ..."
start=${SECONDS}
(cd "${WORK}" && CGO_ENABLED=0 GOBIN="${WORK}" GOFLAGS="-buildvcs=false" \
  go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@${KIND_VERSION}") >&2 \
  || die "go install sigs.k8s.io/kind@${KIND_VERSION} failed"
"${WORK}/kind" version >&2 || die "the built kind does not run"
mv -f "${WORK}/kind" "${KIND}"
log "kind ${KIND_VERSION} built in $((SECONDS - start))s: ${KIND}"
echo "${KIND}"

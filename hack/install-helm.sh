#!/usr/bin/env bash
# Build (once) and cache the helm binary from the Go module proxy; print its path on stdout.
#
#   helm="$(bash hack/install-helm.sh)" && "${helm}" lint charts/gpuplan-operator
#
# The binary lands in ${GPUPLAN_CACHE:-$HOME/.cache/gpuplan}/helm-<version>/helm. When it is there
# (with its version stamp) the script only prints the path, so calling it every time is cheap. A cold
# build (`go install helm.sh/helm/v3/cmd/helm@<version>`, downloads included) takes a few minutes on
# 2 cores; Go's module and build caches make later rebuilds quicker.
#
# Usage: bash hack/install-helm.sh [--force]
#   --force   rebuild even if cached
# Environment: GPUPLAN_HELM_VERSION (default below), GPUPLAN_CACHE, and Go's own (GOPROXY, ...).
set -euo pipefail

HELM_VERSION="${GPUPLAN_HELM_VERSION:-v3.22.0}"
CACHE="${GPUPLAN_CACHE:-${HOME}/.cache/gpuplan}"
DEST_DIR="${CACHE}/helm-${HELM_VERSION}"
HELM="${DEST_DIR}/helm"
STAMP="${DEST_DIR}/.stamp"

log() { printf '[install-helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

FORCE=0
for arg in "$@"; do
  case "${arg}" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: ${arg}" ;;
  esac
done

cached() { [[ -x "${HELM}" && -f "${STAMP}" && "$(cat "${STAMP}")" == "${HELM_VERSION}" ]]; }

if ((FORCE == 0)) && cached; then
  echo "${HELM}"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not on PATH (helm ${HELM_VERSION} needs a recent Go)"
mkdir -p "${DEST_DIR}"

# One build at a time per cache directory; a second caller waits and then finds the binary.
exec 9>"${DEST_DIR}/.lock"
if ! flock -n 9; then
  log "another build holds ${DEST_DIR}/.lock; waiting for it"
  flock 9
fi
if ((FORCE == 0)) && cached; then
  echo "${HELM}"
  exit 0
fi

WORK="$(mktemp -d "${DEST_DIR}/.build-XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

log "building helm ${HELM_VERSION} with $(go env GOVERSION) (GOPROXY=$(go env GOPROXY)) ..."
start=${SECONDS}

# The Kubernetes version helm assumes offline (`.Capabilities.KubeVersion` in `helm template`,
# the lint rules' deprecation checks) comes from ldflags, as helm's own Makefile sets them: the
# minor version of the k8s.io/client-go that this helm release is built with.
MOD_DIR="$(cd "${WORK}" && go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -n "${MOD_DIR}" && -f "${MOD_DIR}/go.mod" ]] || die "could not download helm.sh/helm/v3@${HELM_VERSION}"
CLIENT_GO="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "${MOD_DIR}/go.mod")"  # v0.<minor>.<patch>
K8S_MINOR="$(cut -d. -f2 <<<"${CLIENT_GO}")"
[[ "${K8S_MINOR}" =~ ^[0-9]+$ ]] || die "cannot read the k8s.io/client-go version from ${MOD_DIR}/go.mod"

LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LDFLAGS+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${K8S_MINOR}"
done

# `go install pkg@version` builds outside any module (from ${WORK}), with helm's own go.mod/go.sum.
(cd "${WORK}" && CGO_ENABLED=0 GOBIN="${WORK}" GOFLAGS="-buildvcs=false" \
  go install -trimpath -ldflags "${LDFLAGS}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}") >&2 \
  || die "go install helm.sh/helm/v3/cmd/helm@${HELM_VERSION} failed"

"${WORK}/helm" version --short >&2 || die "the built helm does not run"
mv -f "${WORK}/helm" "${HELM}"
echo "${HELM_VERSION}" >"${STAMP}"
log "helm ${HELM_VERSION} built in $((SECONDS - start))s: ${HELM}"
echo "${HELM}"

#!/usr/bin/env bash
# Build (once) and cache the upstream binaries of the local control plane:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes, hack/k8s/)
#   etcd                                                              (go.etcd.io/etcd/server/v3, hack/etcd/)
#   kwok, kwokctl                                                     (sigs.k8s.io/kwok)
# and with --kubelet also what the real-kubelet nodes run (hack/kubelet-up.sh):
#   kubelet                                                           (k8s.io/kubernetes, hack/k8s/)
#   fakegpu (a device plugin), fakedra (a DRA kubelet plugin),        (hack/k8s/fakegpu, hack/k8s/fakedra,
#   pause (the pod sandbox's process)                                  hack/k8s/pause)
#   containerd, containerd-shim-runc-v2, ctr                          (github.com/containerd/containerd)
# and with --kind also what a locally made kind node image needs (hack/kind/node-image.sh):
#   kubeadm, kube-proxy                                               (k8s.io/kubernetes, hack/k8s/)
#   coredns                                                           (github.com/coredns/coredns)
#
# Binaries land in ${GPUPLAN_CACHE:-$HOME/.cache/gpuplan}/k8s-<version>/bin/ and are reused when
# present with the right version stamp, so a second run takes a moment. A cold build on 2 cores
# takes a while (see the report printed at the end); Go's module and build caches are reused too.
#
# Usage: bash hack/build-binaries.sh [--force] [--kubelet] [--kind] [--print-bin-dir]
#   --force          rebuild everything even if cached
#   --kubelet        also build the node binaries (kubelet, containerd, fakegpu, fakedra, pause)
#   --kind           also build kubeadm, kube-proxy and coredns (implies --kubelet)
#   --print-bin-dir  print the bin directory and exit (nothing is built)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "${HACK_DIR}/versions.sh"

FORCE=0
KUBELET=0
KIND=0
for arg in "$@"; do
  case "${arg}" in
    --force) FORCE=1 ;;
    --kubelet) KUBELET=1 ;;
    --kind) KUBELET=1; KIND=1 ;;
    --print-bin-dir) echo "${GPUPLAN_BIN_DIR}"; exit 0 ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-binaries: unknown argument: ${arg}" >&2; exit 2 ;;
  esac
done

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go >= 1.25 is needed)"

BIN_DIR="${GPUPLAN_BIN_DIR}"
mkdir -p "${BIN_DIR}"

# One build at a time per cache directory (e.g. two clones running cluster-up at once).
exec 9>"${BIN_DIR}/.lock"
if ! flock -n 9; then
  log "another build holds ${BIN_DIR}/.lock; waiting for it"
  flock 9
fi

# Leftovers of an interrupted build (we hold the lock, so nobody else is building).
rm -rf "${BIN_DIR}"/.build-*

export CGO_ENABLED=0
# The wrapper modules commit go.mod and go.sum: never let a build edit them.
export GOFLAGS="-mod=readonly"
GO_VERSION="$(go env GOVERSION)"

K8S_MINOR="${K8S_VERSION#v}"; K8S_MINOR="${K8S_MINOR#*.}"; K8S_MINOR="${K8S_MINOR%%.*}"
K8S_MAJOR="${K8S_VERSION#v}"; K8S_MAJOR="${K8S_MAJOR%%.*}"
BUILD_DATE="1970-01-01T00:00:00Z"  # fixed: keeps the binaries reproducible

k8s_ldflags() {
  local flags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
    flags+=" -X ${pkg}.gitMajor=${K8S_MAJOR}"
    flags+=" -X ${pkg}.gitMinor=${K8S_MINOR}"
    flags+=" -X ${pkg}.gitTreeState=clean"
    flags+=" -X ${pkg}.buildDate=${BUILD_DATE}"
  done
  printf '%s' "${flags}"
}

KWOK_LDFLAGS="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION}"
ETCD_LDFLAGS="-s -w"

# stamp <name> <version>: what the cached binary was built from; a change triggers a rebuild.
stamp_of() { printf '%s go=%s\n' "$2" "${GO_VERSION}"; }

is_cached() {
  local name="$1" version="$2"
  [[ "${FORCE}" == 0 && -x "${BIN_DIR}/${name}" && -f "${BIN_DIR}/.${name}.stamp" ]] &&
    [[ "$(cat "${BIN_DIR}/.${name}.stamp")" == "$(stamp_of "${name}" "${version}")" ]]
}

TOTAL_START=${SECONDS}
BUILT=()
REPORT=()

# build <name> <version> <module dir or "-"> <package[@version]> <ldflags> [build tags]
build() {
  local name="$1" version="$2" moddir="$3" pkg="$4" ldflags="$5" tags="${6:-}"
  if is_cached "${name}" "${version}"; then
    REPORT+=("${name} ${version}: cached")
    return 0
  fi
  local start=${SECONDS} tmp
  tmp="$(mktemp -d "${BIN_DIR}/.build-${name}.XXXXXX")"
  log "building ${name} ${version} (${pkg}) ..."
  if [[ "${moddir}" == "-" ]]; then
    # A plain module without replace directives: `go install pkg@version` uses its own go.sum.
    GOBIN="${tmp}" GOFLAGS="" go install -trimpath -ldflags "${ldflags}" "${pkg}" ||
      { rm -rf "${tmp}"; die "building ${name} failed"; }
    local built
    built="${tmp}/$(basename "${pkg%@*}")"
    [[ "${built}" == "${tmp}/${name}" ]] || mv "${built}" "${tmp}/${name}"
  else
    go build -C "${moddir}" -trimpath -tags "${tags}" -ldflags "${ldflags}" -o "${tmp}/${name}" "${pkg}" ||
      { rm -rf "${tmp}"; die "building ${name} failed"; }
  fi
  mv -f "${tmp}/${name}" "${BIN_DIR}/${name}"
  rm -rf "${tmp}"
  stamp_of "${name}" "${version}" >"${BIN_DIR}/.${name}.stamp"
  local took=$((SECONDS - start))
  log "built ${name} in ${took}s (total so far $((SECONDS - TOTAL_START))s)"
  BUILT+=("${name}")
  REPORT+=("${name} ${version}: built in ${took}s")
}

# Fetch modules first so that network time and compile time show up separately.
# download <module dir> <label> <package>...
download() {
  local moddir="$1" what="$2"
  shift 2
  local start=${SECONDS}
  log "downloading Go modules for ${what} (GOMODCACHE=$(go env GOMODCACHE)) ..."
  go list -C "${moddir}" -deps "$@" >/dev/null || die "downloading modules for ${what} failed"
  log "modules for ${what} ready in $((SECONDS - start))s"
}

need_k8s=0
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  is_cached "${b}" "${K8S_VERSION}" || need_k8s=1
done
need_etcd=0
is_cached etcd "${ETCD_VERSION}" || need_etcd=1

if [[ "${need_etcd}" == 1 ]]; then
  download "${HACK_DIR}/etcd" "etcd ${ETCD_VERSION}" go.etcd.io/etcd/server/v3
fi
if [[ "${need_k8s}" == 1 ]]; then
  download "${HACK_DIR}/k8s" "kubernetes ${K8S_VERSION}" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
fi

build etcd "${ETCD_VERSION}" "${HACK_DIR}/etcd" go.etcd.io/etcd/server/v3 "${ETCD_LDFLAGS}"
build kwok "${KWOK_VERSION}" - "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" "${KWOK_LDFLAGS}"
build kwokctl "${KWOK_VERSION}" - "sigs.k8s.io/kwok/cmd/kwokctl@${KWOK_VERSION}" "${KWOK_LDFLAGS}"
K8S_LDFLAGS="$(k8s_ldflags)"
build kubectl "${K8S_VERSION}" "${HACK_DIR}/k8s" k8s.io/kubernetes/cmd/kubectl "${K8S_LDFLAGS}"
build kube-scheduler "${K8S_VERSION}" "${HACK_DIR}/k8s" k8s.io/kubernetes/cmd/kube-scheduler "${K8S_LDFLAGS}"
build kube-controller-manager "${K8S_VERSION}" "${HACK_DIR}/k8s" k8s.io/kubernetes/cmd/kube-controller-manager "${K8S_LDFLAGS}"
build kube-apiserver "${K8S_VERSION}" "${HACK_DIR}/k8s" k8s.io/kubernetes/cmd/kube-apiserver "${K8S_LDFLAGS}"

if [[ "${KUBELET}" == 1 ]]; then
  # The node programs of this module are keyed by their source as well as the version: editing
  # one rebuilds it.
  node_key() { printf '%s+%s' "${K8S_VERSION}" "$(cat "${HACK_DIR}/k8s/$1"/*.go | sha256sum | cut -c1-12)"; }
  is_cached kubelet "${K8S_VERSION}" ||
    download "${HACK_DIR}/k8s" "kubelet ${K8S_VERSION}" k8s.io/kubernetes/cmd/kubelet
  build kubelet "${K8S_VERSION}" "${HACK_DIR}/k8s" k8s.io/kubernetes/cmd/kubelet "${K8S_LDFLAGS}"
  # its unit tests first, whenever it is (re)built (-trimpath: the build's compiled packages serve)
  if ! is_cached fakegpu "$(node_key fakegpu)"; then
    go test -C "${HACK_DIR}/k8s" -trimpath -vet=off ./fakegpu >&2 || die "fakegpu's tests failed"
  fi
  build fakegpu "$(node_key fakegpu)" "${HACK_DIR}/k8s" ./fakegpu "-s -w"
  if ! is_cached fakedra "$(node_key fakedra)"; then
    go test -C "${HACK_DIR}/k8s" -trimpath -vet=off ./fakedra >&2 || die "fakedra's tests failed"
  fi
  build fakedra "$(node_key fakedra)" "${HACK_DIR}/k8s" ./fakedra "-s -w"

  # containerd 1.7 for its CDI support (see versions.sh). `go install pkg@version` refuses its
  # module (its go.mod has an exclude directive), so the build runs inside the module as the
  # proxy serves it (verified against the checksum database), with the module's own go.sum:
  # exactly the dependencies containerd released with. btrfs, devmapper and zfs need cgo or
  # kernel pieces that the nodes do not use (they run overlayfs).
  need_containerd=0
  for b in containerd containerd-shim-runc-v2 ctr; do
    is_cached "${b}" "${CONTAINERD_VERSION}" || need_containerd=1
  done
  if [[ "${need_containerd}" == 1 ]]; then
    start=${SECONDS}
    CONTAINERD_DIR="$(cd / && GOFLAGS="" go mod download -json "github.com/containerd/containerd@${CONTAINERD_VERSION}" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${CONTAINERD_DIR}" ]] || die "downloading containerd ${CONTAINERD_VERSION} failed"
    log "containerd ${CONTAINERD_VERSION} module ready in $((SECONDS - start))s"
    CONTAINERD_LDFLAGS="-s -w -X github.com/containerd/containerd/version.Version=${CONTAINERD_VERSION}"
    for b in containerd containerd-shim-runc-v2 ctr; do
      build "${b}" "${CONTAINERD_VERSION}" "${CONTAINERD_DIR}" "./cmd/${b}" "${CONTAINERD_LDFLAGS}" \
        "no_btrfs no_devmapper no_zfs"
    done
  fi
  build pause "$(node_key pause)" "${HACK_DIR}/k8s" ./pause "-s -w"
fi

if [[ "${KIND}" == 1 ]]; then
  # kubeadm checks the version stamp of itself and of the kubelet: same ldflags as the others.
  need_kind=0
  for b in kubeadm kube-proxy; do
    is_cached "${b}" "${K8S_VERSION}" || need_kind=1
  done
  if [[ "${need_kind}" == 1 ]]; then
    download "${HACK_DIR}/k8s" "kubeadm and kube-proxy ${K8S_VERSION}" k8s.io/kubernetes/cmd/kubeadm \
      k8s.io/kubernetes/cmd/kube-proxy
  fi
  build kubeadm "${K8S_VERSION}" "${HACK_DIR}/k8s" k8s.io/kubernetes/cmd/kubeadm "${K8S_LDFLAGS}"
  build kube-proxy "${K8S_VERSION}" "${HACK_DIR}/k8s" k8s.io/kubernetes/cmd/kube-proxy "${K8S_LDFLAGS}"
  # a plain module: its own go.sum, as kwok's (cold: about 7 minutes here, its many plugins)
  build coredns "${COREDNS_VERSION}" - "github.com/coredns/coredns@${COREDNS_VERSION}" "-s -w"
fi

if [[ ${#BUILT[@]} -gt 0 ]]; then
  log "summary:"
  for line in "${REPORT[@]}"; do log "  ${line}"; done
  log "total $((SECONDS - TOTAL_START))s; cache: $(du -sh "${BIN_DIR}" | cut -f1) in ${BIN_DIR}"
else
  log "all binaries cached in ${BIN_DIR}"
fi
echo "${BIN_DIR}"

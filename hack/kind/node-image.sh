#!/usr/bin/env bash
# Build (once) a kind node image with podman, nothing from an image registry, and print its name
# (localhost/gpuplan-kind-node:<k8s version>-<key>) on stdout. kind's own node image
# (kindest/node) and its `kind build node-image` both start from images in a registry; this makes
# the same thing from what the local harness already builds:
#
#   - Debian bookworm minbase (mmdebstrap, hack/debian-base.sh) plus Debian's systemd, runc, CNI
#     plugins and the tools kubeadm's preflight checks ask for;
#   - kind's entrypoint, kubelet unit and kubeadm drop-ins, from the kind Go module's source
#     (images/base/files, the version of hack/kind/install-kind.sh);
#   - kubelet, kubeadm, kubectl and containerd 1.7 from hack/build-binaries.sh --kind;
#   - hack/kind/node/: containerd's config and unit (these machines refuse the negative OOM
#     scores of kind's), a bridge CNI config per node in place of kindnetd, kind's manifests;
#   - the images kubeadm starts, loaded into the node's containerd (as `kind build node-image`
#     does): kube-apiserver, kube-controller-manager, kube-scheduler and etcd (each one static
#     binary of the local harness), CoreDNS (COREDNS_VERSION, one static binary too), kube-proxy
#     (on the Debian base, for iptables) and pause, tagged as `kubeadm config images list` names
#     them. The etcd image carries the harness's etcd (hack/versions.sh) under the tag kubeadm
#     pins.
#
# The key is a hash of everything that went in; an unchanged tree rebuilds nothing (warm: a few
# seconds, once hack/build-binaries.sh --kind has built its binaries).
#
# Usage: bash hack/kind/node-image.sh        (then: kind create cluster --image <printed name>)
# Needs podman, runc and mmdebstrap (bash hack/install-image-tools.sh) and Go.
set -euo pipefail

KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HACK_DIR="$(cd "${KIND_DIR}/.." && pwd)"
# shellcheck source=../versions.sh
source "${HACK_DIR}/versions.sh"
# shellcheck source=../podman-env.sh
source "${HACK_DIR}/podman-env.sh"
# shellcheck source=../debian-base.sh
source "${HACK_DIR}/debian-base.sh"

KIND_VERSION="${GPUPLAN_KIND_VERSION:-v0.30.0}"

log() { printf '[kind-node-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
for tool in podman mmdebstrap runc go; do
  command -v "${tool}" >/dev/null || die "${tool} is missing (bash hack/install-image-tools.sh; Go >= 1.25)"
done

started=${SECONDS}
BIN_DIR="$(bash "${HACK_DIR}/build-binaries.sh" --kind)"
KIND_SRC="$(cd / && GOFLAGS="" go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "${KIND_SRC}/images/base/files" ]] || die "no kind ${KIND_VERSION} module source (go mod download failed?)"
KIND_BASE="$(debian_base_image gpuplan-kind-base \
  systemd,systemd-sysv,dbus,conntrack,iptables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,procps,ca-certificates,runc,containernetworking-plugins,socat)"

# the images kubeadm will start, by the names it gives them
mapfile -t KUBEADM_IMAGES < <("${BIN_DIR}/kubeadm" config images list --kubernetes-version "${K8S_VERSION}" 2>/dev/null)
((${#KUBEADM_IMAGES[@]} > 0)) || die "kubeadm config images list printed nothing"
PAUSE_IMAGE="$(printf '%s\n' "${KUBEADM_IMAGES[@]}" | grep '/pause:')" || die "kubeadm names no pause image"

key_files=("${BIN_DIR}"/{kubelet,kubeadm,kubectl,kube-proxy,kube-apiserver,kube-controller-manager,kube-scheduler,etcd,coredns,pause,containerd,containerd-shim-runc-v2,ctr}
  "${KIND_DIR}"/node/* "${BASH_SOURCE[0]}")
KEY="$({
  printf '%s\n' "${KIND_VERSION}" "$(podman image inspect --format '{{.Id}}' "${KIND_BASE}")" "${KUBEADM_IMAGES[@]}" "${key_files[@]}"
  cat "${key_files[@]}"
} | sha256sum | cut -c1-12)"
IMAGE="localhost/gpuplan-kind-node:${K8S_VERSION}-${KEY}"
if podman image exists "${IMAGE}"; then
  log "${IMAGE} (cached)"
  echo "${IMAGE}"
  exit 0
fi

CTX="$(mktemp -d "${PODMAN_DIR}/kind-node-ctx.XXXXXX")"
BUILDER="gpuplan-kind-node-build-${KEY}"
STAGE="localhost/gpuplan-kind-node-stage:${KEY}"
MADE=()  # component images, removed once saved into the archive
cleanup() {
  podman rm -f --time 0 "${BUILDER}" >/dev/null 2>&1 || true
  podman rmi "${STAGE}" "${MADE[@]}" >/dev/null 2>&1 || true
  rm -rf "${CTX}"
}
trap cleanup EXIT

# --- the images kubeadm starts --------------------------------------------------------------
# one static binary in /usr/local/bin and a /tmp: what the control-plane components need
# (scratch_image IMAGE BINARY [PATH]: at PATH, default /usr/local/bin/BINARY, and the entrypoint)
scratch_image() {
  local image="$1" binary="$2" path="${3:-/usr/local/bin/$2}" dir="${CTX}/img-${2}"
  mkdir -p "${dir}$(dirname "${path}")" "${dir}/tmp" "${dir}/etc"
  chmod 1777 "${dir}/tmp"
  cp "${BIN_DIR}/${binary}" "${dir}${path}"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"${dir}/etc/passwd"
  tar -C "${dir}" --owner=0 --group=0 -cf "${dir}.tar" .
  podman import --quiet --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change "ENTRYPOINT [\"${path}\"]" "${dir}.tar" "${image}" >/dev/null
  MADE+=("${image}")
}
for image in "${KUBEADM_IMAGES[@]}"; do
  name="${image##*/}"; name="${name%%:*}"
  case "${name}" in
    kube-apiserver|kube-controller-manager|kube-scheduler|etcd) scratch_image "${image}" "${name}" ;;
    pause) scratch_image "${image}" pause ;;
    coredns)  # kubeadm's Deployment passes only arguments: the image's entrypoint is /coredns
      [[ "${image##*:}" == "${COREDNS_VERSION}" ]] ||
        log "kubeadm names ${image}; it carries CoreDNS ${COREDNS_VERSION} (hack/versions.sh)"
      scratch_image "${image}" coredns /coredns
      ;;
    kube-proxy)  # it runs iptables and conntrack: on the Debian base
      mkdir -p "${CTX}/kube-proxy"
      cp "${BIN_DIR}/kube-proxy" "${CTX}/kube-proxy/"
      # shellcheck disable=SC2016  # ${KIND_BASE} is the Containerfile's own
      printf 'ARG KIND_BASE\nFROM ${KIND_BASE}\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' >"${CTX}/kube-proxy/Containerfile"
      podman build --quiet --pull=never --network=none --build-arg "KIND_BASE=${KIND_BASE}" \
        --tag "${image}" "${CTX}/kube-proxy" >/dev/null
      MADE+=("${image}")
      ;;
    *) log "not made: ${image} (its pods will not start)" ;;
  esac
done
podman save --quiet --multi-image-archive --format docker-archive -o "${CTX}/images.tar" "${MADE[@]}"
log "made and saved ${#MADE[@]} images for kubeadm: ${MADE[*]}"

# --- the node's file system -----------------------------------------------------------------
mkdir -p "${CTX}/node/kind"
cp -r "${KIND_SRC}/images/base/files/kind/bin" "${KIND_SRC}/images/base/files/etc" "${CTX}/node/kind/"
cp "${KIND_SRC}/images/base/files/usr/local/bin/entrypoint" "${CTX}/node/kind/"
chmod -R u+w "${CTX}/node/kind"  # the module cache is read-only
cp "${KIND_DIR}"/node/* "${CTX}/node/"
sed -i "s|@PAUSE_IMAGE@|${PAUSE_IMAGE}|" "${CTX}/node/containerd.toml"
printf '%s' "${K8S_VERSION}" >"${CTX}/node/version"
cp "${BIN_DIR}"/{kubelet,kubeadm,kubectl,containerd,containerd-shim-runc-v2,ctr} "${CTX}/node/"
podman build --quiet --pull=never --network=none --build-arg "KIND_BASE=${KIND_BASE}" \
  --tag "${STAGE}" --file "${CTX}/node/Containerfile" "${CTX}/node" >/dev/null

# --- the images, into the node's containerd (as `kind build node-image` loads them) ----------
podman run --detach --quiet --privileged --cgroupns=private --name "${BUILDER}" --tmpfs /run \
  --stop-signal SIGTERM --volume "${CTX}/images.tar:/run/images.tar:ro" --entrypoint /usr/local/bin/containerd "${STAGE}" >/dev/null
for _ in $(seq 100); do
  podman exec "${BUILDER}" ctr version >/dev/null 2>&1 && break
  sleep 0.2
done
podman exec "${BUILDER}" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
  --all-platforms --no-unpack --digests /run/images.tar >/dev/null
loaded="$(podman exec "${BUILDER}" ctr --namespace=k8s.io images list -q)"
for image in "${MADE[@]}"; do
  grep -qxF "${image}" <<<"${loaded}" || die "${image} is not in the node's containerd after the import: ${loaded}"
done
podman stop --time 10 "${BUILDER}" >/dev/null
podman commit --quiet --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' "${BUILDER}" "${IMAGE}" >/dev/null

# Earlier trees' node images go (kind's clusters run copies: podman refuses what still runs).
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' --filter reference=localhost/gpuplan-kind-node); do
  [[ "${old}" == "${IMAGE}" ]] || podman rmi "${old}" >/dev/null 2>&1 || true
done
log "made ${IMAGE} in $((SECONDS - started))s ($(podman image inspect --format '{{.Size}}' "${IMAGE}" | numfmt --to=iec))"
echo "${IMAGE}"

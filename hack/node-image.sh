#!/usr/bin/env bash
# Build the images of the real-kubelet tier with podman, nothing from an image registry:
#
#   localhost/gpuplan-node:<key>      a node: bookworm minbase + Debian runc, CNI plugins,
#                                     iptables, plus the kubelet, containerd 1.7 (CDI), the fake
#                                     GPU device plugin and the fake DRA kubelet plugin from
#                                     hack/build-binaries.sh --kubelet (hack/node/)
#   localhost/gpuplan-pause:<key>     the pod sandbox image: one static binary (hack/k8s/pause)
#   localhost/gpuplan-workload:<key>  python3 + the load tester package with its sample service and
#                                     the wheels its senders need (hdrhistogram, psutil, uvloop),
#                                     downloaded on this host at the versions in .venv and unpacked
#                                     into the image (no pip, no index inside the build)
#
# The pause and workload images are also saved as archives into $GPUPLAN_CACHE/node-images/<key>/,
# which each node's containerd imports when it starts (pods use them with imagePullPolicy
# IfNotPresent: a tag that is not :latest). Every tag is a hash of what went into the image, so
# an unchanged tree rebuilds nothing (warm: a few seconds).
#
# Prints shell assignments on stdout: NODE_IMAGE=..., PAUSE_IMAGE=..., WORKLOAD_IMAGE=...,
# IMAGES_DIR=... (everything else goes to stderr).
#
# Usage: bash hack/node-image.sh
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"
# shellcheck source=podman-env.sh
source "${HACK_DIR}/podman-env.sh"
# shellcheck source=debian-base.sh
source "${HACK_DIR}/debian-base.sh"

log() { printf '[node-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
for tool in podman mmdebstrap runc; do
  command -v "${tool}" >/dev/null || die "${tool} is missing: bash hack/install-image-tools.sh"
done

started=${SECONDS}
BIN_DIR="$(bash "${HACK_DIR}/build-binaries.sh" --kubelet)"
# The two bases side by side: each is mostly waiting on the Debian mirror.
CTX="$(mktemp -d "${PODMAN_DIR}/node-ctx.XXXXXX")"
trap 'rm -rf "${CTX}"' EXIT
debian_base_image gpuplan-workload-base python3 >"${CTX}/python-base" &
python_base_pid=$!
NODE_BASE="$(debian_base_image gpuplan-node-base \
  runc,containernetworking-plugins,iptables,conntrack,iproute2,procps)"
wait "${python_base_pid}" || die "making the workload's base image failed"
PYTHON_BASE="$(cat "${CTX}/python-base")"

# key <files...>: a short hash of the files' contents (and names)
key() { { printf '%s\n' "$@"; cat "$@"; } | sha256sum | cut -c1-12; }
image_id() { podman image inspect --format '{{.Id}}' "$1"; }

# --- pause ----------------------------------------------------------------------------------
PAUSE_IMAGE="localhost/gpuplan-pause:$(key "${BIN_DIR}/pause")"
if ! podman image exists "${PAUSE_IMAGE}"; then
  mkdir -p "${CTX}/pause"
  cp "${BIN_DIR}/pause" "${CTX}/pause/pause"
  tar -C "${CTX}/pause" -cf "${CTX}/pause.tar" pause
  podman import --quiet --change 'ENTRYPOINT ["/pause"]' "${CTX}/pause.tar" "${PAUSE_IMAGE}" >/dev/null
  log "made ${PAUSE_IMAGE}"
fi

# --- node -----------------------------------------------------------------------------------
NODE_FILES=("${BIN_DIR}"/{kubelet,fakegpu,fakedra,containerd,containerd-shim-runc-v2,ctr} "${HACK_DIR}"/node/{Containerfile,containerd.toml,kubelet.yaml,entrypoint.sh})
NODE_IMAGE="localhost/gpuplan-node:$(printf '%s %s' "$(image_id "${NODE_BASE}")" "$(key "${NODE_FILES[@]}")" | sha256sum | cut -c1-12)"
if ! podman image exists "${NODE_IMAGE}"; then
  mkdir -p "${CTX}/node"
  cp "${NODE_FILES[@]}" "${CTX}/node/"
  podman build --quiet --pull=never --network=none --build-arg "NODE_BASE=${NODE_BASE}" \
    --tag "${NODE_IMAGE}" --file "${CTX}/node/Containerfile" "${CTX}/node" >/dev/null
  log "made ${NODE_IMAGE}"
fi

# --- workload -------------------------------------------------------------------------------
# The load tester's runtime dependencies for Debian bookworm's CPython 3.11, pinned to what .venv
# holds (what the tests ran). Plots are drawn on the host, and gRPC targets are not measured in
# pods: matplotlib and grpcio stay out. A wheel is a zip archive with nothing to run at install,
# so unpacking it onto the image's Python path is an install.
PY="${GPUPLAN_PYTHON:-${REPO_ROOT}/.venv/bin/python}"
[[ -x "${PY}" ]] || die "no ${PY}: run make install first"
WHEELS=(hdrhistogram psutil uvloop)
PINS="$("${PY}" -m pip freeze --disable-pip-version-check 2>/dev/null | grep -iE "^($(IFS='|'; echo "${WHEELS[*]}"))==")"
[[ "$(wc -l <<<"${PINS}")" == "${#WHEELS[@]}" ]] || die "the load tester's dependencies are not all in ${PY%/bin/*} (make install): ${PINS}"
WHEEL_DIR="${GPUPLAN_CACHE}/wheels/workload-$(sha256sum <<<"${PINS}" | cut -c1-12)"
if [[ ! -f "${WHEEL_DIR}/.complete" ]]; then
  rm -rf "${WHEEL_DIR}"
  mkdir -p "${WHEEL_DIR}"
  # shellcheck disable=SC2086  # one pin per word
  "${PY}" -m pip download --quiet --disable-pip-version-check --no-deps --dest "${WHEEL_DIR}" \
    --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    ${PINS} >&2
  touch "${WHEEL_DIR}/.complete"
  log "downloaded the workload's wheels into ${WHEEL_DIR}"
fi
touch "${WHEEL_DIR}"
mapfile -t WHEEL_FILES < <(ls "${WHEEL_DIR}"/*.whl)
mapfile -t LOADTEST_FILES < <(cd "${REPO_ROOT}" && git ls-files loadtest 2>/dev/null || find loadtest -type f -not -path '*/__pycache__/*')
WORKLOAD_FILES=("${HACK_DIR}/node/workload.Containerfile" "${HACK_DIR}/node/show-devices" "${WHEEL_FILES[@]}")
for f in "${LOADTEST_FILES[@]}"; do WORKLOAD_FILES+=("${REPO_ROOT}/${f}"); done
WORKLOAD_IMAGE="localhost/gpuplan-workload:$(printf '%s %s' "$(image_id "${PYTHON_BASE}")" "$(key "${WORKLOAD_FILES[@]}")" | sha256sum | cut -c1-12)"
if ! podman image exists "${WORKLOAD_IMAGE}"; then
  mkdir -p "${CTX}/workload"
  (cd "${REPO_ROOT}" && cp --parents "${LOADTEST_FILES[@]}" "${CTX}/workload/")
  cp "${HACK_DIR}/node/show-devices" "${CTX}/workload/"
  mkdir -p "${CTX}/workload/site"
  for whl in "${WHEEL_FILES[@]}"; do "${PY}" -m zipfile -e "${whl}" "${CTX}/workload/site/"; done
  podman build --quiet --pull=never --network=none --build-arg "PYTHON_BASE=${PYTHON_BASE}" \
    --tag "${WORKLOAD_IMAGE}" --file "${HACK_DIR}/node/workload.Containerfile" "${CTX}/workload" >/dev/null
  log "made ${WORKLOAD_IMAGE}"
fi

# --- archives for the nodes' containerd -----------------------------------------------------
IMAGES_KEY="$(printf '%s %s' "${PAUSE_IMAGE}" "${WORKLOAD_IMAGE}" | sha256sum | cut -c1-12)"
IMAGES_DIR="${GPUPLAN_CACHE}/node-images/${IMAGES_KEY}"
if [[ ! -f "${IMAGES_DIR}/.complete" ]]; then
  rm -rf "${IMAGES_DIR}"
  mkdir -p "${IMAGES_DIR}"
  podman save --quiet --format docker-archive -o "${IMAGES_DIR}/pause.tar" "${PAUSE_IMAGE}"
  podman save --quiet --format docker-archive -o "${IMAGES_DIR}/workload.tar" "${WORKLOAD_IMAGE}"
  touch "${IMAGES_DIR}/.complete"
  log "saved the pause and workload images into ${IMAGES_DIR}"
fi
# archives of other trees' images: kept two weeks after their last use
touch "${IMAGES_DIR}"
find "${GPUPLAN_CACHE}/node-images" -mindepth 1 -maxdepth 1 -type d -mtime +14 -exec rm -rf {} +

# Earlier trees' images go, except what a node container still runs (podman refuses those).
for repo in localhost/gpuplan-node localhost/gpuplan-pause localhost/gpuplan-workload; do
  for old in $(podman images --format '{{.Repository}}:{{.Tag}}' --filter "reference=${repo}"); do
    [[ "${old}" == "${NODE_IMAGE}" || "${old}" == "${PAUSE_IMAGE}" || "${old}" == "${WORKLOAD_IMAGE}" ]] && continue
    podman rmi "${old}" >/dev/null 2>&1 || true
  done
done

log "node images ready in $((SECONDS - started))s"
printf 'NODE_IMAGE=%s\nPAUSE_IMAGE=%s\nWORKLOAD_IMAGE=%s\nIMAGES_DIR=%s\n' \
  "${NODE_IMAGE}" "${PAUSE_IMAGE}" "${WORKLOAD_IMAGE}" "${IMAGES_DIR}"

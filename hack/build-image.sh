#!/usr/bin/env bash
# Build the operator image from the repository's Dockerfile with no outside registry:
#
#   1. a Python base image made here: `mmdebstrap --variant=minbase bookworm` + Debian's python3,
#      imported with `podman import` (cached: built once per recipe);
#   2. the wheels of gpuplan's operator dependencies, downloaded on this host with pip (manylinux,
#      CPython 3.11 = bookworm's python3; pinned to the versions installed in .venv, so the image
#      runs what the tests ran), into dist/wheels/deps/, and gpuplan's own wheel into dist/wheels/;
#   3. `podman build --network=none`: the Dockerfile installs those wheels offline.
#
# Prints the image name on stdout (everything else goes to stderr).
#
# Usage: bash hack/build-image.sh
# Env:   GPUPLAN_CACHE (default ~/.cache/gpuplan): podman's storage and the base recipe live in
#        $GPUPLAN_CACHE/podman, downloaded wheels in $GPUPLAN_CACHE/wheels, outside the clone so a
#        fresh clone (CI) reuses them.
#        GPUPLAN_IMAGE (default localhost/gpuplan-operator:<version>)
#        GPUPLAN_PYTHON (default .venv/bin/python): the Python that downloads and builds.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=podman-env.sh
source "${HACK_DIR}/podman-env.sh"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"
cd "${REPO_ROOT}"

log() { printf '[build-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PY="${GPUPLAN_PYTHON:-${REPO_ROOT}/.venv/bin/python}"
[[ -x "${PY}" ]] || die "no ${PY}: run make install first"
for tool in podman mmdebstrap runc; do
  command -v "${tool}" >/dev/null || die "${tool} is missing: apt-get install -y podman mmdebstrap runc"
done

VERSION="$("${PY}" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
IMAGE="${GPUPLAN_IMAGE:-localhost/gpuplan-operator:${VERSION}}"

# --- 1. the base image ------------------------------------------------------------------------
# The recipe is its cache key: change a package or option and a new base is made.
BASE_SUITE="bookworm"
BASE_PACKAGES="python3,python3-venv"
BASE_KEY="$(printf '%s %s v1' "${BASE_SUITE}" "${BASE_PACKAGES}" | sha256sum | cut -c1-12)"
BASE_IMAGE="localhost/gpuplan-python-base:${BASE_SUITE}-${BASE_KEY}"

exec 9>"${PODMAN_DIR}/.base.lock"
flock 9
if podman image exists "${BASE_IMAGE}"; then
  log "base image ${BASE_IMAGE} (cached)"
else
  log "making the base image ${BASE_IMAGE}: mmdebstrap ${BASE_SUITE} minbase + ${BASE_PACKAGES}"
  started=${SECONDS}
  rootfs="$(mktemp -d "${PODMAN_DIR}/rootfs.XXXXXX")"
  trap 'rm -rf "${rootfs}"' EXIT
  # no docs, man pages or translations: the image needs none of them
  mmdebstrap --quiet --variant=minbase --include="${BASE_PACKAGES}" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --aptopt='Acquire::Languages "none"' \
    "${BASE_SUITE}" "${rootfs}/rootfs.tar" >&2
  podman import --quiet --change 'CMD ["python3"]' "${rootfs}/rootfs.tar" "${BASE_IMAGE}" >/dev/null
  rm -rf "${rootfs}"
  trap - EXIT
  log "base image made in $((SECONDS - started))s"
fi
flock -u 9

# --- 2. the wheels ----------------------------------------------------------------------------
# Requirements: gpuplan's dependencies and its `operator` extra, read from pyproject.toml;
# constraints: the versions installed in .venv (what the unit and e2e tests ran).
mapfile -t REQUIREMENTS < <("${PY}" - <<'EOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["operator"]))
EOF
)
CONSTRAINTS="$("${PY}" -m pip freeze --exclude-editable --disable-pip-version-check)"
PLATFORMS=(--platform manylinux1_x86_64 --platform manylinux2010_x86_64 --platform manylinux2014_x86_64)
for minor in $(seq 17 36); do  # bookworm has glibc 2.36
  PLATFORMS+=(--platform "manylinux_2_${minor}_x86_64")
done
WHEEL_KEY="$(printf '%s\n' "${REQUIREMENTS[@]}" "${CONSTRAINTS}" "${PLATFORMS[*]}" | sha256sum | cut -c1-12)"
WHEEL_CACHE="${GPUPLAN_CACHE}/wheels/cp311-${WHEEL_KEY}"
if [[ -f "${WHEEL_CACHE}/.complete" ]]; then
  log "dependency wheels ${WHEEL_CACHE} (cached)"
else
  log "downloading the dependency wheels into ${WHEEL_CACHE}"
  rm -rf "${WHEEL_CACHE}"
  mkdir -p "${WHEEL_CACHE}"
  "${PY}" -m pip download --quiet --disable-pip-version-check --dest "${WHEEL_CACHE}" \
    --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 "${PLATFORMS[@]}" \
    --constraint <(printf '%s\n' "${CONSTRAINTS}") "${REQUIREMENTS[@]}" >&2
  touch "${WHEEL_CACHE}/.complete"
fi

# Drop wheel sets nobody used for two weeks (a new .venv makes a new set).
touch "${WHEEL_CACHE}"
find "${GPUPLAN_CACHE}/wheels" -mindepth 1 -maxdepth 1 -name 'cp311-*' -mtime +14 -exec rm -rf {} +

# gpuplan's own wheel (pure Python), built fresh from this tree; the dependencies beside it in
# deps/, hard links to the cache (the Dockerfile installs them in a layer of their own).
rm -rf dist/wheels
mkdir -p dist/wheels/deps
# (setuptools' warnings are noise here: the log is shown only when the build fails)
if ! "${PY}" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir dist/wheels . \
  >dist/wheels.log 2>&1; then
  cat dist/wheels.log >&2
  die "pip wheel failed"
fi
cp -l "${WHEEL_CACHE}"/*.whl dist/wheels/deps/ 2>/dev/null || cp "${WHEEL_CACHE}"/*.whl dist/wheels/deps/

# --- 3. the image -----------------------------------------------------------------------------
log "podman build ${IMAGE} (FROM ${BASE_IMAGE}, no network inside the build)"
started=${SECONDS}
previous="$(podman image inspect --format '{{.Id}}' "${IMAGE}" 2>/dev/null || true)"
podman build --quiet --layers --pull=never --network=none --build-arg "PYTHON_IMAGE=${BASE_IMAGE}" \
  --tag "${IMAGE}" --file Dockerfile . >/dev/null
# Keep the storage from growing run after run, but keep the build cache that matters: the deps
# stage (a cache hit, tagged so that pruning keeps it); the image this one replaced and the other
# untagged layers go.
podman build --quiet --layers --pull=never --network=none --build-arg "PYTHON_IMAGE=${BASE_IMAGE}" \
  --target deps --tag "${IMAGE%:*}-deps:cache" --file Dockerfile . >/dev/null
current="$(podman image inspect --format '{{.Id}}' "${IMAGE}")"
if [[ -n "${previous}" && "${previous}" != "${current}" ]]; then
  podman rmi "${previous}" >/dev/null 2>&1 || true
fi
podman image prune --force >/dev/null
log "built ${IMAGE} in $((SECONDS - started))s ($(podman image inspect --format '{{.Size}}' "${IMAGE}" | numfmt --to=iec) bytes)"
echo "${IMAGE}"

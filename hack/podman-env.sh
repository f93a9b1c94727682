# shellcheck shell=bash
# podman settings of hack/build-image.sh and the image tests (sourced): storage of our own under
# $GPUPLAN_CACHE/podman (outside the clone, so a fresh clone reuses the base image), and the
# configuration these machines need. Sets PODMAN_DIR and exports CONTAINERS_CONF,
# CONTAINERS_STORAGE_CONF and CONTAINERS_REGISTRIES_CONF.
#
# - default_ulimits: podman's defaults exceed what the machine allows ("error setting rlimit").
# - cgroupfs and file events: no systemd here. runc: crun refuses this cgroup v1 hybrid layout
#   ("cgroups in hybrid mode not supported") because the v2 hierarchy has a controller enabled.
# - no search registries: an unqualified image name must never reach out to a registry.
# - runroot and tmp_dir (state of running containers) on /run when it is writable, so that a
#   reboot clears them as podman expects; the image storage itself persists.

GPUPLAN_CACHE="${GPUPLAN_CACHE:-${HOME}/.cache/gpuplan}"
PODMAN_DIR="${GPUPLAN_CACHE}/podman"
mkdir -p "${PODMAN_DIR}/storage"
_podman_run="/run/gpuplan-podman/$(printf '%s' "${PODMAN_DIR}" | sha256sum | cut -c1-12)"
if ! mkdir -p "${_podman_run}" 2>/dev/null; then
  _podman_run="${PODMAN_DIR}/run"
  mkdir -p "${_podman_run}"
fi

# _podman_write FILE: stdin into $PODMAN_DIR/FILE, replaced only when it changed (another process
# may be reading the current one), through a temporary file of its own.
_podman_write() {
  local tmp
  tmp="$(mktemp "${PODMAN_DIR}/.$1.XXXXXX")"
  cat >"${tmp}"
  if cmp -s "${tmp}" "${PODMAN_DIR}/$1"; then rm -f "${tmp}"; else mv -f "${tmp}" "${PODMAN_DIR}/$1"; fi
}
_podman_write containers.conf <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
tmp_dir = "${_podman_run}/libpod"
EOF
_podman_write storage.conf <<EOF
[storage]
driver = "overlay"
graphroot = "${PODMAN_DIR}/storage"
runroot = "${_podman_run}/storage"
EOF
_podman_write registries.conf <<<'unqualified-search-registries = []'
unset -f _podman_write
unset _podman_run

export CONTAINERS_CONF="${PODMAN_DIR}/containers.conf"
export CONTAINERS_STORAGE_CONF="${PODMAN_DIR}/storage.conf"
export CONTAINERS_REGISTRIES_CONF="${PODMAN_DIR}/registries.conf"

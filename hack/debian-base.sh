# shellcheck shell=bash
# debian_base_image NAME PACKAGES (sourced; needs hack/podman-env.sh sourced first): print the name
# of a local image made from `mmdebstrap --variant=minbase bookworm` plus the comma-separated
# Debian PACKAGES, making it first when it is not in podman's storage yet. Nothing comes from an
# image registry: the rootfs is made from the Debian mirror and imported with `podman import`.
#
# The recipe is the cache key (localhost/NAME:bookworm-<hash of suite and packages>): a recipe is
# made once per podman storage ($GPUPLAN_CACHE/podman), about 40 s plus the packages.
debian_base_image() {
  local name="$1" packages="$2" suite="bookworm" key image rootfs started
  key="$(printf '%s %s v1' "${suite}" "${packages}" | sha256sum | cut -c1-12)"
  image="localhost/${name}:${suite}-${key}"
  (
    exec 9>"${PODMAN_DIR}/.base-${name}.lock"
    flock 9
    if podman image exists "${image}"; then
      printf '[debian-base %s] %s (cached)\n' "$(date +%H:%M:%S)" "${image}" >&2
      exit 0
    fi
    printf '[debian-base %s] making %s: mmdebstrap %s minbase + %s\n' "$(date +%H:%M:%S)" \
      "${image}" "${suite}" "${packages}" >&2
    started=${SECONDS}
    rootfs="$(mktemp -d "${PODMAN_DIR}/rootfs.XXXXXX")"
    trap 'rm -rf "${rootfs}"' EXIT
    mmdebstrap --quiet --variant=minbase --include="${packages}" \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --aptopt='Acquire::Languages "none"' \
      "${suite}" "${rootfs}/rootfs.tar" >&2
    podman import --quiet "${rootfs}/rootfs.tar" "${image}" >/dev/null
    printf '[debian-base %s] made %s in %ss\n' "$(date +%H:%M:%S)" "${image}" "$((SECONDS - started))" >&2
  ) || return 1
  printf '%s\n' "${image}"
}

# shellcheck shell=bash
# shellcheck disable=SC2034  # KIND is used by the scripts that source this file
# Which kind, container engine and node image `make demo CLUSTER=kind` uses (sourced by
# hack/kind/up.sh and hack/kind/down.sh after their log/die). Sets KIND (the binary) and, for up.sh,
# KIND_NODE_IMAGE (empty: kind's own default image).
#
# - kubectl: the local harness's (hack/build-binaries.sh) first on PATH when it is built: it is
#   the cluster's version, and gpu-nodes.sh needs >= 1.24.
# - kind: the one on PATH, else the one hack/kind/install-kind.sh builds and caches.
# - engine: Docker when its daemon answers and KIND_EXPERIMENTAL_PROVIDER does not say otherwise;
#   else podman (KIND_EXPERIMENTAL_PROVIDER=podman), with the project's podman settings
#   (hack/podman-env.sh: its storage, where the node image is, and the ulimits these machines need).
# - node image: GPUPLAN_KIND_IMAGE if set; with Docker, kind's default (kindest/node, from its
#   registry); with podman, one made here from the local harness's binaries
#   (hack/kind/node-image.sh), as no registry is needed then.

KIND_ENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if command -v kind >/dev/null; then
  KIND="$(command -v kind)"
else
  KIND="$(bash "${KIND_ENV_DIR}/install-kind.sh")"
fi

if [[ -z "${KIND_EXPERIMENTAL_PROVIDER:-}" ]] && ! { command -v docker >/dev/null && docker info >/dev/null 2>&1; }; then
  command -v podman >/dev/null || die "neither Docker nor podman can run kind's nodes here (podman: bash hack/install-image-tools.sh)"
  export KIND_EXPERIMENTAL_PROVIDER=podman
fi
if [[ "${KIND_EXPERIMENTAL_PROVIDER:-}" == podman ]]; then
  # shellcheck source=../podman-env.sh
  source "${KIND_ENV_DIR}/../podman-env.sh"
fi

# kind_node_image: print the node image up.sh passes to kind (empty: kind's default)
kind_node_image() {
  if [[ -n "${GPUPLAN_KIND_IMAGE:-}" ]]; then
    echo "${GPUPLAN_KIND_IMAGE}"
  elif [[ "${KIND_EXPERIMENTAL_PROVIDER:-}" == podman ]]; then
    bash "${KIND_ENV_DIR}/node-image.sh"
  fi
}

# kind_use_harness_kubectl: the harness's kubectl first on PATH, when it is built
kind_use_harness_kubectl() {
  local bin
  bin="$(bash "${KIND_ENV_DIR}/../build-binaries.sh" --print-bin-dir)"
  if [[ -x "${bin}/kubectl" ]]; then PATH="${bin}:${PATH}"; fi
  return 0
}

# kind_podman_network: the workers join the control plane by its container name, which podman's
# CNI networks resolve only through the dnsname plugin (netavark's networks resolve names
# themselves). kind makes its network "kind" once and keeps it: one made before the plugin was
# there, and no longer used, is made again.
kind_podman_network() {
  [[ "$(podman info --format '{{.Host.NetworkBackend}}')" == cni ]] || return 0
  local dir found=0
  for dir in /usr/lib/cni /usr/libexec/cni /opt/cni/bin; do
    if [[ -x "${dir}/dnsname" ]]; then found=1; fi
  done
  ((found)) ||
    die "podman's CNI networks here do not resolve container names (kind's workers need it): bash hack/install-image-tools.sh --kind"
  if podman network exists kind && [[ "$(podman network inspect --format '{{.DNSEnabled}}' kind)" != true ]] &&
    [[ -z "$(podman ps --all --quiet --filter network=kind)" ]]; then
    log "making podman's network kind again, with name resolution"
    podman network rm kind >/dev/null
  fi
}

#!/usr/bin/env bash
# Install the Debian packages the image build and its tests need (CI runs this; on a machine of
# your own install them however you like): podman (with runc), and mmdebstrap for the base image.
# Idempotent and quiet: asks apt only for what is missing. Needs root (or sudo) and apt.
# --kind: also what kind's podman nodes need (hack/kind/up.sh): the dnsname CNI plugin, through
# which podman's CNI networks resolve container names (kind's workers join the control plane by
# its name).
set -euo pipefail
PACKAGES=(podman runc mmdebstrap)
if [[ "${1:-}" == --kind ]]; then
  PACKAGES+=(golang-github-containernetworking-plugin-dnsname)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}\n' "${p}" 2>/dev/null | grep -q '^install ok installed$' || missing+=("${p}")
done
if ((${#missing[@]} == 0)); then
  echo "[install-image-tools] ${PACKAGES[*]}: installed" >&2
  exit 0
fi
SUDO=()
[[ "$(id -u)" == 0 ]] || SUDO=(sudo)
echo "[install-image-tools] apt-get install ${missing[*]}" >&2
started=${SECONDS}
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[install-image-tools] installed in $((SECONDS - started))s" >&2

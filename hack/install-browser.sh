#!/usr/bin/env bash
# Install Debian's Chromium and its chromedriver for the plan page's browser tests (tests/view;
# CI runs this). Idempotent and quiet: asks apt only for what is missing. Needs root (or sudo).
set -euo pipefail
PACKAGES=(chromium chromium-driver)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}\n' "${p}" 2>/dev/null | grep -q '^install ok installed$' || missing+=("${p}")
done
if ((${#missing[@]} == 0)); then
  echo "[install-browser] ${PACKAGES[*]}: installed" >&2
  exit 0
fi
SUDO=()
[[ "$(id -u)" == 0 ]] || SUDO=(sudo)
echo "[install-browser] apt-get install ${missing[*]}" >&2
started=${SECONDS}
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[install-browser] installed in $((SECONDS - started))s" >&2

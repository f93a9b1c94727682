#!/usr/bin/env bash
# Install Debian's prometheus (the server only) for the dashboard's end-to-end test, which runs it
# against the operator's metrics endpoint. CI runs this; on a machine of your own install it however
# you like. Idempotent and quiet: asks apt only when it is missing. Needs root (or sudo) and apt.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
  echo "[install-prometheus] $(command -v prometheus): installed" >&2
  exit 0
fi
SUDO=()
[[ "$(id -u)" == 0 ]] || SUDO=(sudo)
echo "[install-prometheus] apt-get install prometheus" >&2
started=${SECONDS}
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# the package starts a system service on machines with an init; the test runs its own server
"${SUDO[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
echo "[install-prometheus] installed in $((SECONDS - started))s" >&2

#!/usr/bin/env bash
# Fail when the Helm chart's CRDs differ from the one source, crds/ (called by `make lint`).
#
# Every crds/*.yaml must have a byte-identical copy in charts/gpuplan-operator/crds/, and the chart
# must hold no CRD file that crds/ lacks. Fix a drift with:
#   cp crds/*.yaml charts/gpuplan-operator/crds/
#
# Usage: bash hack/check-crd-drift.sh   (exit 0: in sync; 1: drift, with what differs on stderr)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${REPO_ROOT}/crds"
CHART="${REPO_ROOT}/charts/gpuplan-operator/crds"

problems=()
shopt -s nullglob
sources=("${SRC}"/*.yaml)
((${#sources[@]} > 0)) || problems+=("no CRDs in crds/")
for src in "${sources[@]}"; do
  name="$(basename "${src}")"
  copy="${CHART}/${name}"
  if [[ ! -f "${copy}" ]]; then
    problems+=("charts/gpuplan-operator/crds/${name} is missing (crds/${name} has no copy in the chart)")
  elif ! cmp -s "${src}" "${copy}"; then
    problems+=("charts/gpuplan-operator/crds/${name} differs from crds/${name}:")
    problems+=("$(diff -u "${src}" "${copy}" | head -40 || true)")
  fi
done
for copy in "${CHART}"/*.yaml; do
  name="$(basename "${copy}")"
  [[ -f "${SRC}/${name}" ]] || problems+=("charts/gpuplan-operator/crds/${name} has no source in crds/ (remove it, or add it to crds/)")
done

if ((${#problems[@]} > 0)); then
  {
    echo "check-crd-drift: the chart's CRDs are out of sync with crds/ (the one source):"
    printf '  %s\n' "${problems[@]}"
    echo "fix: cp crds/*.yaml charts/gpuplan-operator/crds/  (and delete chart CRDs that crds/ lacks)"
  } >&2
  exit 1
fi
echo "check-crd-drift: charts/gpuplan-operator/crds/ matches crds/ (${#sources[@]} files)"

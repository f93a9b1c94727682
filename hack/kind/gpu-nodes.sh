#!/usr/bin/env bash
# Advertise fake GPUs on nodes that have none (kind): every node labelled
# `nvidia.com/gpu.count=N` (hack/kind/cluster.yaml labels the workers) gets N `nvidia.com/gpu` in
# status.capacity and status.allocatable, through the status subresource, as a device plugin
# would report them. The kubelet keeps extended resources it does not manage itself, and the
# scheduler then places pods that ask for `nvidia.com/gpu` on these nodes.
# Idempotent: a node that already advertises its count is left alone.
#
# Usage: KUBECONFIG=... bash hack/kind/gpu-nodes.sh [NODE...]   (default: every labelled node;
#        a node named must be labelled)
# Needs kubectl >= 1.24 (--subresource) on PATH or in $KUBECTL.
set -euo pipefail

KUBECTL="${KUBECTL:-kubectl}"
log() { printf '[gpu-nodes %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# "<name> <label count> <advertised count>" per labelled node
rows="$("${KUBECTL}" get nodes -l nvidia.com/gpu.count -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.labels.nvidia\.com/gpu\.count} {.status.allocatable.nvidia\.com/gpu}{"\n"}{end}')"
if (($#)); then  # only the nodes named, each of which must be labelled
  wanted=""
  for node in "$@"; do
    row="$(grep -m1 "^${node} " <<<"${rows}" || true)"
    [[ -n "${row}" ]] || { log "ERROR: node ${node} is not labelled nvidia.com/gpu.count (or does not exist)"; exit 1; }
    wanted+="${row}"$'\n'
  done
  rows="${wanted}"
fi
[[ -n "${rows}" ]] || { log "no node is labelled nvidia.com/gpu.count"; exit 1; }
while read -r node count advertised; do
  [[ -n "${node}" ]] || continue
  if ! [[ "${count}" =~ ^[0-9]+$ ]]; then
    log "ERROR: node ${node}: label nvidia.com/gpu.count is '${count}', not a number of cards"
    exit 1
  fi
  if [[ "${advertised}" == "${count}" ]]; then
    continue
  fi
  "${KUBECTL}" patch node "${node}" --subresource=status --type=merge \
    -p "{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"${count}\"},\"allocatable\":{\"nvidia.com/gpu\":\"${count}\"}}}" \
    >/dev/null
  log "node ${node}: ${count} nvidia.com/gpu"
done <<<"${rows}"

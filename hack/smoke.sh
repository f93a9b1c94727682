#!/usr/bin/env bash
# Smoke check of the running local cluster (start it with: bash hack/cluster-up.sh).
#  - all nodes Ready
#  - a pod asking for 3 nvidia.com/gpu, pinned to p4-001, with a PriorityClass, is bound by
#    kube-scheduler and made Running by kwok
#  - a second pod asking for 6 more GPUs on p4-001 (8 in all) stays Pending: Insufficient nvidia.com/gpu
#  - a ConfigMap round trip; namespace deletion (namespace controller + kwok pod removal)
# Exits non-zero on any failure.
#
# Usage: bash hack/smoke.sh            (KUBECONFIG defaults to <repo>/.cluster/kubeconfig)
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "${HACK_DIR}/common.sh"

exec 2>&1  # one stream: progress lines and kubectl output stay in order
TIMEOUT="${GPUPLAN_SMOKE_TIMEOUT:-60}"
if [[ -x "${GPUPLAN_BIN_DIR}/kubectl" ]]; then use_bin_dir "${GPUPLAN_BIN_DIR}"; fi
export KUBECONFIG="${GPUPLAN_KUBECONFIG:-${KUBECONFIG_OUT}}"
[[ -s "${KUBECONFIG}" ]] || die "no kubeconfig at ${KUBECONFIG}; run: bash hack/cluster-up.sh"

NS="gpuplan-smoke-$$"
PC="gpuplan-smoke-$$"
NODE="p4-001"
START=${SECONDS}

cleanup() {
  local rc=$?
  kubectl delete namespace "${NS}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl delete priorityclass "${PC}" --ignore-not-found >/dev/null 2>&1 || true
  if ((rc != 0)); then log "FAILED (exit ${rc})"; fi
}
trap cleanup EXIT

step() { log "== $*"; }

step "API server $(kubectl version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1) at $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
kubectl get --raw=/readyz >/dev/null || die "API server not ready"

step "nodes (all must be Ready)"
kubectl get nodes -L gpuplan.ragnaros.io/gpu-type -L nvidia.com/gpu.product \
  -o custom-columns='NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,GPU-TYPE:.metadata.labels.gpuplan\.ragnaros\.io/gpu-type,GPUS:.status.allocatable.nvidia\.com/gpu,CPU:.status.allocatable.cpu,MEMORY:.status.allocatable.memory'
kubectl wait --for=condition=Ready node --all --timeout="${TIMEOUT}s" >/dev/null ||
  die "not all nodes are Ready"
gpus="$(kubectl get node "${NODE}" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')"
[[ "${gpus}" == "8" ]] || die "node ${NODE} advertises nvidia.com/gpu='${gpus}', expected 8"

step "namespace ${NS}, PriorityClass ${PC}, pod gpu3 (nvidia.com/gpu: 3 on ${NODE})"
kubectl create namespace "${NS}"
# Pods are refused until the controller-manager has created the namespace's default ServiceAccount.
sa_exists() { kubectl -n "${NS}" get serviceaccount default >/dev/null 2>&1; }
poll "${TIMEOUT}" "ServiceAccount ${NS}/default" sa_exists || die "no default ServiceAccount in ${NS}"
kubectl apply -f - <<EOF
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: ${PC}
value: 1000
globalDefault: false
description: gpuplan smoke check
---
apiVersion: v1
kind: Pod
metadata:
  name: gpu3
  namespace: ${NS}
spec:
  priorityClassName: ${PC}
  nodeSelector:
    kubernetes.io/hostname: ${NODE}
  containers:
    - name: main
      image: fake.example/gpu-job:latest   # never pulled: kwok fakes the kubelet
      resources:
        requests: {cpu: 100m, memory: 64Mi, nvidia.com/gpu: 3}
        limits: {nvidia.com/gpu: 3}
EOF
kubectl -n "${NS}" wait --for=jsonpath='{.status.phase}'=Running pod/gpu3 --timeout="${TIMEOUT}s" ||
  { kubectl -n "${NS}" describe pod gpu3 >&2 || true; die "pod gpu3 did not become Running"; }
bound="$(kubectl -n "${NS}" get pod gpu3 -o jsonpath='{.spec.nodeName} priority={.spec.priority}')"
log "pod gpu3 Running on ${bound}"
[[ "${bound}" == "${NODE} priority=1000" ]] || die "pod gpu3: expected '${NODE} priority=1000', got '${bound}'"

step "pod gpu6 (nvidia.com/gpu: 6 more on ${NODE}, only 5 free) must stay Pending"
kubectl apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: gpu6
  namespace: ${NS}
spec:
  nodeSelector:
    kubernetes.io/hostname: ${NODE}
  containers:
    - name: main
      image: fake.example/gpu-job:latest
      resources:
        limits: {nvidia.com/gpu: 6}
EOF
kubectl -n "${NS}" wait --for=condition=PodScheduled=False pod/gpu6 --timeout="${TIMEOUT}s" >/dev/null ||
  die "pod gpu6 was not reported unschedulable"
msg="$(kubectl -n "${NS}" get pod gpu6 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')"
log "pod gpu6: ${msg}"
grep -q 'Insufficient nvidia.com/gpu' <<<"${msg}" || die "pod gpu6 unschedulable for another reason: ${msg}"

step "allocated resources of ${NODE}"
kubectl describe node "${NODE}" | sed -n '/^Allocated resources:/,/^Events:/p' | sed '$d'

step "ConfigMap round trip"
kubectl -n "${NS}" create configmap smoke --from-literal=hello=world >/dev/null
[[ "$(kubectl -n "${NS}" get configmap smoke -o jsonpath='{.data.hello}')" == "world" ]] ||
  die "ConfigMap content mismatch"
kubectl -n "${NS}" delete configmap smoke >/dev/null
log "ConfigMap created, read back and deleted"

step "delete namespace ${NS} (namespace controller + kwok remove the pods)"
kubectl delete namespace "${NS}" --timeout="${TIMEOUT}s" >/dev/null || die "namespace ${NS} was not deleted"
kubectl delete priorityclass "${PC}" >/dev/null
log "smoke check passed in $((SECONDS - START))s"

#!/usr/bin/env bash
# `make demo`: the local cluster, the CRD, the operator (in the background), the sample plan;
# then show what the operator made of it. Idempotent: run it again to re-apply and re-show.
#
# Stop with `make cluster-down` (it stops the demo operator too). `demo.sh --clean` stops the demo
# operator and removes the demo's plan and legacy pods but keeps the cluster: `make e2e` runs it
# first, so the suite starts from empty nodes and no second operator competes with its own.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "${HACK_DIR}/common.sh"

PY="${REPO_ROOT}/.venv/bin/python"
[[ -x "${PY}" ]] || die "no .venv: run make install first"
PLAN="${GPUPLAN_DEMO_PLAN:-${REPO_ROOT}/examples/image-fence.yaml}"
OP_PID="${CLUSTER_DIR}/operator.pid"
OP_LOG="${CLUSTER_DIR}/operator.log"

if [[ "${1:-}" == "--clean" ]]; then
  pid="$(cat "${OP_PID}" 2>/dev/null || true)"
  if [[ -s "${KUBECONFIG_OUT}" ]]; then
    use_bin_dir "$(bash "${HACK_DIR}/build-binaries.sh")"
    export KUBECONFIG="${KUBECONFIG_OUT}"
  fi
  if [[ -s "${KUBECONFIG_OUT}" ]] && kubectl get --raw /readyz >/dev/null 2>&1 \
    && kubectl get namespace ragnaros legacy >/dev/null 2>&1; then
    log "removing the demo's plan (the operator undoes what it wrote) and namespaces"
    if [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null; then
      kubectl delete gpuplans --all -n ragnaros --wait=true --timeout=60s >/dev/null || true
    fi
    # whatever is left (no operator running): drop the finalizer and the plan's node label
    for p in $(kubectl get gpuplans -n ragnaros -o name 2>/dev/null); do
      kubectl patch -n ragnaros "${p}" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null || true
    done
    kubectl label nodes --all "gpuplan.ragnaros.io/ragnaros.image-fence-" >/dev/null 2>&1 || true
    kubectl delete namespace ragnaros legacy --ignore-not-found --wait=true --timeout=120s >/dev/null
  fi
  if [[ -n "${pid}" ]] && kill "${pid}" 2>/dev/null; then
    log "stopped the demo operator (pid ${pid})"
  fi
  rm -f "${OP_PID}"
  exit 0
fi

# CLUSTER=kind (`make demo CLUSTER=kind`): a kind cluster with fake GPUs instead of the local
# control plane; everything after this is the same.
case "${CLUSTER:-local}" in
  local)
    bash "${HACK_DIR}/cluster-up.sh"
    use_bin_dir "$(bash "${HACK_DIR}/build-binaries.sh")"
    export KUBECONFIG="${KUBECONFIG_OUT}"
    ;;
  kind)
    KUBECONFIG="$(bash "${HACK_DIR}/kind/up.sh")"
    export KUBECONFIG
    # the cluster's kubectl (up.sh made sure of it: the harness's when built, else the one on PATH)
    bin="$(bash "${HACK_DIR}/build-binaries.sh" --print-bin-dir)"
    if [[ -x "${bin}/kubectl" ]]; then PATH="${bin}:${PATH}"; fi
    ;;
  *) die "CLUSTER=${CLUSTER}: expected local or kind" ;;
esac

log "installing the CRD and its admission policy"
kubectl apply --server-side -f "${REPO_ROOT}/crds/gpuallocationplans.yaml" \
  -f "${REPO_ROOT}/crds/plans-admission-policy.yaml" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/gpuallocationplans.gpuplan.ragnaros.io >/dev/null

pid="$(cat "${OP_PID}" 2>/dev/null || true)"
if [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null; then
  log "operator already running (pid ${pid}, log ${OP_LOG})"
else
  log "starting the operator (log ${OP_LOG})"
  nohup "${PY}" -m gpuplan_operator --liveness http://127.0.0.1:18080/healthz >>"${OP_LOG}" 2>&1 &
  echo $! >"${OP_PID}"
fi

# Some cards are already taken by workloads gpuplan does not own (examples/pods.yaml, bound to
# p4-003 and t4-002): the plan has to work around them, as `gpuplan plan --pods` does offline.
kubectl create namespace legacy --dry-run=client -o yaml | kubectl apply -f - >/dev/null
poll 60 "the legacy namespace's service account" kubectl get serviceaccount default -n legacy >/dev/null
# On kind the nodes have other names: a worker's gpuplan.ragnaros.io/demo-node label says which
# sample node it plays (hack/kind/cluster.yaml).
pods="$(cat "${REPO_ROOT}/examples/pods.yaml")"
for node in $(awk '$1 == "nodeName:" {print $2}' "${REPO_ROOT}/examples/pods.yaml" | sort -u); do
  actual="$(kubectl get nodes -l "gpuplan.ragnaros.io/demo-node=${node}" -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)"
  [[ -n "${actual}" ]] && pods="${pods//nodeName: ${node}/nodeName: ${actual}}"
done
kubectl apply -f - <<<"${pods}" >/dev/null
log "legacy pods hold 3 cards on p4-003 and 4 on t4-002"

ns="$("${PY}" -c 'import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"].get("namespace","default"))' "${PLAN}")"
name="$("${PY}" -c 'import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["name"])' "${PLAN}")"
kubectl create namespace "${ns}" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
log "applying ${PLAN#"${REPO_ROOT}"/}"
kubectl apply -f "${PLAN}"

ready() {
  [[ "$(kubectl get gpuplan "${name}" -n "${ns}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
phase() { kubectl get gpuplan "${name}" -n "${ns}" -o jsonpath='{.status.phase}' 2>/dev/null; }
if ! poll 180 "plan ${ns}/${name} to be Ready (every pod scheduled where planned)" ready; then
  log "phase is '$(phase)'; last operator log lines:"
  tail -n 20 "${OP_LOG}" >&2
  exit 1
fi

echo
echo "\$ kubectl get gpuplans -A"
kubectl get gpuplans -A
echo
echo "\$ kubectl get pods -n ${ns} -o wide   (each pod on the node the plan chose)"
kubectl get pods -n "${ns}" -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,GPUS:.spec.containers[0].resources.limits.nvidia\.com/gpu,PRIORITY:.spec.priorityClassName,STATUS:.status.phase'
echo
echo "\$ kubectl get gpuplan ${name} -n ${ns} -o jsonpath='{.status.message}'"
kubectl get gpuplan "${name}" -n "${ns}" -o jsonpath='{.status.message}'
echo
echo
echo "KUBECONFIG=${KUBECONFIG}   (try: kubectl describe gpuplan ${name} -n ${ns})"
echo "Stop everything with: make cluster-down$([[ "${CLUSTER:-local}" == kind ]] && echo " CLUSTER=kind")"

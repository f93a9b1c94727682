#!/usr/bin/env bash
# Start (or reuse) the local control plane: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and the kwok controller, run as plain processes by `kwokctl --runtime binary`
# from the binaries that hack/build-binaries.sh builds and caches. Then create the fake GPU
# nodes of hack/sample-nodes.yaml. With KUBELETS=N (N > 0), also N real nodes: podman containers
# running containerd, a kubelet and a fake GPU device plugin, and KUBELET_DRA_NODES more whose
# cards a DRA kubelet plugin publishes (hack/kubelet-up.sh).
#
# Idempotent: when the cluster is already up and healthy it only prints the kubeconfig path.
# The admin kubeconfig (certificates embedded) is written to <repo>/.cluster/kubeconfig;
# kwokctl's state lives in <repo>/.cluster/kwok/ (KWOK_WORKDIR), ~/.kube/config is never touched.
#
# Usage: bash hack/cluster-up.sh
# Env:   KUBELETS (real nodes, default 0: the real nodes already running are left as they are),
#        KUBELET_GPUS (fake cards per real node, default 4), KUBELET_DRA_NODES (default 0) and the
#        other KUBELET_* of hack/kubelet-up.sh, GPUPLAN_CLUSTER_NAME (default gpuplan), GPUPLAN_CLUSTER_TIMEOUT (seconds, default 180),
#        GPUPLAN_CACHE (binary cache, see hack/build-binaries.sh)
# Then:  export KUBECONFIG=<repo>/.cluster/kubeconfig
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "${HACK_DIR}/common.sh"

TIMEOUT="${GPUPLAN_CLUSTER_TIMEOUT:-180}"
KUBELETS="${KUBELETS:-0}"
[[ "${KUBELETS}" =~ ^[0-9]+$ ]] || die "KUBELETS must be a number of real nodes, got '${KUBELETS}'"
# The label of real-kubelet nodes (hack/kubelet-up.sh): kwok leaves them to their kubelets.
KWOK_NODES='!gpuplan.ragnaros.io/kubelet'

# Binaries first (a no-op taking a moment when cached); its stdout is the bin directory.
BIN_DIR="$(bash "${HACK_DIR}/build-binaries.sh")"
use_bin_dir "${BIN_DIR}"

mkdir -p "${CLUSTER_DIR}"
# One cluster-up at a time per clone.
exec 8>"${CLUSTER_DIR}/.cluster-up.lock"
flock 8

# kwokctl forks the control-plane processes, which inherit every open descriptor but 0-2 (those
# go to log files). Close the rest first: the lock above, and any pipe of whoever runs this
# script, which would otherwise stay open (lock held, caller waiting for EOF) for the cluster's
# whole life.
kwokctl_run() {
  (
    for fd in /proc/"${BASHPID}"/fd/*; do
      fd="${fd##*/}"
      if ((fd > 2)); then eval "exec ${fd}>&-" 2>/dev/null || true; fi
    done
    exec kwokctl --v=WARN "$@"
  )
}

# Health: every component process kwokctl started is alive, the API server answers /readyz, and
# kube-scheduler and kube-controller-manager keep renewing their leader-election leases.
STATE_DIR="${KWOK_WORKDIR}/clusters/${CLUSTER_NAME}"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok-controller)

# `kwokctl get components` only checks that the pid exists: a killed component that nobody reaped
# (a zombie) still counts as running there, so read the process state ourselves.
component_alive() {
  local pid state
  pid="$(tr -dc '0-9' <"${STATE_DIR}/pids/$1.pid" 2>/dev/null)" || return 1
  [[ -n "${pid}" && -r "/proc/${pid}/stat" ]] || return 1
  state="$(sed 's/^.*) //' "/proc/${pid}/stat" | cut -d' ' -f1)"
  [[ "${state}" != "Z" && "${state}" != "X" ]]
}

components_ready() {
  local c
  for c in "${COMPONENTS[@]}"; do component_alive "${c}" || return 1; done
}

apiserver_ready() {
  [[ -s "${KUBECONFIG_OUT}" ]] &&
    kubectl --kubeconfig "${KUBECONFIG_OUT}" --request-timeout=5s get --raw=/readyz >/dev/null 2>&1
}

# A lease held and renewed within its duration (plus slack for clock granularity).
leases_held() {
  local l out holder renew duration now
  now="$(date +%s)"
  for l in kube-scheduler kube-controller-manager; do
    out="$(kubectl --kubeconfig "${KUBECONFIG_OUT}" --request-timeout=5s -n kube-system get lease "${l}" \
      -o jsonpath='{.spec.holderIdentity} {.spec.renewTime} {.spec.leaseDurationSeconds}' 2>/dev/null)" ||
      return 1
    read -r holder renew duration <<<"${out}"
    [[ -n "${holder}" && -n "${renew}" && -n "${duration}" ]] || return 1
    (( now - $(date -d "${renew}" +%s) <= duration + 5 )) || return 1
  done
}

cluster_healthy() { components_ready && apiserver_ready && leases_held; }

write_kubeconfig() {
  # kwokctl's kubeconfig points at certificate files under its workdir; embed them so the file
  # stands on its own. Write to a temp file first: readers never see a half-written kubeconfig.
  local tmp
  tmp="$(mktemp "${KUBECONFIG_OUT}.XXXXXX")"
  kwokctl get kubeconfig --name "${CLUSTER_NAME}" >"${tmp}.src"
  kubectl --kubeconfig "${tmp}.src" config view --raw --flatten >"${tmp}"
  rm -f "${tmp}.src"
  chmod 600 "${tmp}"
  mv -f "${tmp}" "${KUBECONFIG_OUT}"
}

apply_nodes() {
  kubectl --kubeconfig "${KUBECONFIG_OUT}" apply -f "${HACK_DIR}/sample-nodes.yaml" >/dev/null
  # Status given on create is kept (kwok's node-initialize stage preserves allocatable/capacity),
  # but `apply` never writes status of an existing node. If a node lost its GPUs (e.g. it was
  # re-created without status), restore them through the status subresource; a value that a test
  # changed on purpose is left alone.
  local node gpus current
  current="$(kubectl --kubeconfig "${KUBECONFIG_OUT}" get nodes \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.allocatable.nvidia\.com/gpu}{"\n"}{end}')"
  while read -r node gpus; do
    # "<name> <gpus>" when the node advertises GPUs, "<name> " when it does not
    grep -Eq "^${node} [0-9]" <<<"${current}" && continue
    log "node ${node} advertises no nvidia.com/gpu; setting ${gpus}"
    kubectl --kubeconfig "${KUBECONFIG_OUT}" patch node "${node}" --subresource=status --type=merge \
      -p "{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"${gpus}\"},\"allocatable\":{\"nvidia.com/gpu\":\"${gpus}\"}}}" \
      >/dev/null
  done < <(sample_gpu_nodes)
}

nodes_ready() {
  local not_ready
  not_ready="$(kubectl --kubeconfig "${KUBECONFIG_OUT}" get nodes -l "${KWOK_NODES}" --no-headers 2>/dev/null |
    awk '$2 != "Ready" {print $1}')" || return 1
  [[ -z "${not_ready}" ]] &&
    [[ "$(kubectl --kubeconfig "${KUBECONFIG_OUT}" get nodes -l "${KWOK_NODES}" --no-headers | wc -l)" -ge "$(sample_node_count)" ]]
}

# The running kwok controller's identity: the holder it writes into node leases (first log line
# that names it; kwokctl truncates the log when it starts the process). Empty when unknown: run
# with --v=WARN, kwok names itself only in warnings and errors (typically "Failed to list nodes"
# while the API server is still starting), so a kwok that started after the API server was ready
# never does.
kwok_id() {
  { grep -o -m1 '"id":"[^"]*"' "${STATE_DIR}/logs/kwok-controller.log" 2>/dev/null || true; } | cut -d'"' -f4
}

# node lease name -> holder and renew time, one "name holder renewTime" per line
node_leases() {
  kubectl --kubeconfig "${KUBECONFIG_OUT}" -n kube-node-lease get leases \
    -o jsonpath='{range .items[*]}{.metadata.name} {.spec.holderIdentity} {.spec.renewTime}{"\n"}{end}'
}

# kwok only fakes a node (heartbeats, pods Running/deleted) while it holds the node's lease.
# When kwok's identity is unknown: every node's lease has a holder that renewed it within the
# lease duration (40 s, plus slack).
kwok_holds_leases() {
  local id leases name holder renew now
  id="$(kwok_id)"
  now="$(date +%s)"
  leases="$(node_leases)" || return 1
  for name in $(kubectl --kubeconfig "${KUBECONFIG_OUT}" get nodes -l "${KWOK_NODES}" -o name | cut -d/ -f2); do
    read -r holder renew < <(awk -v n="${name}" '$1 == n {print $2, $3}' <<<"${leases}")
    [[ -n "${holder}" && -n "${renew}" ]] || return 1
    if [[ -n "${id}" ]]; then
      [[ "${holder}" == "${id}" ]] || return 1
    else
      (( now - $(date -d "${renew}" +%s) <= 45 )) || return 1
    fi
  done
}

# After a restart the node leases still name the previous kwok process, and the new one would
# wait for them to expire before taking over. Clear the holder of leases that name another
# identity: kwok then takes them over on its next attempt (every nodeLeaseDuration/4 = 10s).
release_stale_leases() {
  local id name holder real
  id="$(kwok_id)"
  [[ -n "${id}" ]] || return 0
  # a real node's lease is its kubelet's
  real=" $(kubectl --kubeconfig "${KUBECONFIG_OUT}" get nodes -l "${KWOK_NODES#!}" -o name | cut -d/ -f2 | tr '\n' ' ') "
  while read -r name holder _; do
    [[ -n "${name}" && -n "${holder}" && "${holder}" != "${id}" ]] || continue
    [[ "${real}" != *" ${name} "* ]] || continue
    kubectl --kubeconfig "${KUBECONFIG_OUT}" -n kube-node-lease patch lease "${name}" --type=merge \
      -p '{"spec":{"holderIdentity":null}}' >/dev/null 2>&1 || true
  done < <(node_leases)
}

cluster_exists() { kwokctl get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}"; }

# Component flags (client rate limits as a production cluster runs them): hack/control-plane.yaml.
# A cluster made with another version of that file is recreated.
CONTROL_PLANE_CONFIG="${HACK_DIR}/control-plane.yaml"
FLAGS_STAMP="${STATE_DIR}/gpuplan-control-plane.sha256"
flags_current() { [[ "$(cat "${FLAGS_STAMP}" 2>/dev/null)" == "$(sha256sum <"${CONTROL_PLANE_CONFIG}")" ]]; }

# kwokctl links the binaries a cluster runs into its bin/ directory: a cluster made from another
# binary cache (other pinned Kubernetes version, other GPUPLAN_CACHE) is recreated.
uses_our_binaries() {
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler etcd; do
    [[ "$(readlink -f "${STATE_DIR}/bin/${c}")" == "$(readlink -f "${BIN_DIR}/${c}")" ]] || return 1
  done
}

START=${SECONDS}
if cluster_exists && ! uses_our_binaries; then
  log "cluster '${CLUSTER_NAME}' runs binaries from elsewhere ($(readlink "${STATE_DIR}/bin/kube-apiserver" || echo '?')); recreating it with ${BIN_DIR}"
  kwokctl_run delete cluster --name "${CLUSTER_NAME}" || true
  rm -rf "${STATE_DIR}"
elif cluster_exists && ! flags_current; then
  log "cluster '${CLUSTER_NAME}' runs with other control-plane flags; recreating it"
  kwokctl_run delete cluster --name "${CLUSTER_NAME}" || true
  rm -rf "${STATE_DIR}"
fi
if cluster_exists && write_kubeconfig && cluster_healthy; then
  log "cluster '${CLUSTER_NAME}' is already up and healthy"
else
  if cluster_exists; then
    # E.g. after a reboot, or a component died: restart all processes, keeping etcd's data.
    log "cluster '${CLUSTER_NAME}' exists but is not healthy; restarting its components"
    kwokctl_run stop cluster --name "${CLUSTER_NAME}" || log "kwokctl stop cluster failed"
    kwokctl_run start cluster --name "${CLUSTER_NAME}" --timeout "${TIMEOUT}s" ||
      log "kwokctl start cluster failed"
    if ! poll 60 "control plane" cluster_healthy; then
      log "cluster '${CLUSTER_NAME}' still unhealthy; deleting and recreating it"
      kwokctl_run delete cluster --name "${CLUSTER_NAME}" || true
      rm -rf "${STATE_DIR}"
    fi
  fi
  if ! cluster_exists; then
    log "creating cluster '${CLUSTER_NAME}' (kwokctl --runtime binary, Kubernetes ${K8S_VERSION}, workdir ${KWOK_WORKDIR})"
    # Heartbeats: kwokctl's default heartbeat factor 5 gives 200s node leases, so a restarted kwok
    # would wait up to 200s to take the nodes over. Use the kubelet's 40s leases (kwok renews them
    # every 10s) but keep the controller-manager's generous 200s grace before a node goes NotReady.
    kwokctl_run create cluster \
      --name "${CLUSTER_NAME}" \
      --runtime binary \
      --kubeconfig "" \
      --quiet-pull \
      --kube-apiserver-binary "${BIN_DIR}/kube-apiserver" \
      --kube-controller-manager-binary "${BIN_DIR}/kube-controller-manager" \
      --kube-scheduler-binary "${BIN_DIR}/kube-scheduler" \
      --kwok-controller-binary "${BIN_DIR}/kwok" \
      --etcd-binary "${BIN_DIR}/etcd" \
      --heartbeat-factor 1 \
      --node-lease-duration-seconds 40 \
      --config "${CONTROL_PLANE_CONFIG}" \
      --timeout "${TIMEOUT}s" \
      --wait "${TIMEOUT}s" ||
      die "kwokctl create cluster failed; logs: ${STATE_DIR}/logs/"
    sha256sum <"${CONTROL_PLANE_CONFIG}" >"${FLAGS_STAMP}"
  fi
  write_kubeconfig
  poll "${TIMEOUT}" "API server, kube-scheduler and kube-controller-manager" cluster_healthy ||
    die "control plane not healthy after ${TIMEOUT}s; logs: ${STATE_DIR}/logs/"
  log "control plane up in $((SECONDS - START))s"
fi

apply_nodes
poll "${TIMEOUT}" "$(sample_node_count) sample nodes to be Ready" nodes_ready ||
  die "sample nodes not Ready after ${TIMEOUT}s; see: kubectl --kubeconfig ${KUBECONFIG_OUT} get nodes"
release_stale_leases
poll "${TIMEOUT}" "kwok to take over the node leases" kwok_holds_leases ||
  die "kwok does not hold the node leases after ${TIMEOUT}s; logs: ${STATE_DIR}/logs/kwok-controller.log"
log "cluster '${CLUSTER_NAME}' ready ($((SECONDS - START))s): $(kubectl --kubeconfig "${KUBECONFIG_OUT}" version -o json |
  sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1), $(kubectl --kubeconfig "${KUBECONFIG_OUT}" get nodes --no-headers | wc -l) nodes"
if ((KUBELETS > 0)); then
  # (without the lock: the nodes' podman monitors would inherit it and hold it for their life)
  bash "${HACK_DIR}/kubelet-up.sh" "${KUBELETS}" 8>&- ||
    die "real-kubelet nodes did not come up (bash hack/kubelet-up.sh ${KUBELETS})"
fi
log "use it with: export KUBECONFIG=${KUBECONFIG_OUT}"
echo "${KUBECONFIG_OUT}"

#!/bin/bash
# PID 1 of a real-kubelet node container (hack/kubelet-up.sh starts it with podman run --privileged
# --cgroupns=private): prepares what the kubelet needs, then runs containerd, the kubelet, the
# fake GPU device plugin and the fake DRA kubelet plugin, and exits when any of them does.
#
# Env: NODE_NAME, POD_CIDR (this node's pods, e.g. 10.244.1.0/24), GPUS (fake devices, 0 = no
# plugin), DRA_GPUS and DRA_DOMAINS (the DRA plugin's devices and their PCIe roots, 0 = no
# plugin), DRA_DRIVER and DRA_PRODUCT (its name and the cards' productName), PAUSE_IMAGE, NODE_LABELS, NODE_TAINTS;
# /etc/kubernetes/kubeconfig and /images/*.tar are mounted by kubelet-up.sh.
set -euo pipefail
log() { printf '[node %s %s] %s\n' "${NODE_NAME}" "$(date +%H:%M:%S)" "$*"; }

# Mounts made later (pod volumes) must propagate to containerd's and the kubelet's view.
mount --make-rshared /

# The API server runs on the host: this container's default gateway.
gateway="$(ip -4 route | awk '$1 == "default" {print $3; exit}')"
[[ -n "${gateway}" ]] || { log "no default route: cannot reach the API server"; exit 1; }
echo "${gateway} gpuplan-apiserver" >>/etc/hosts

# The kubelet and cAdvisor need a machine id.
[[ -s /etc/machine-id ]] || tr -d '-' </proc/sys/kernel/random/uuid >/etc/machine-id

# cgroupRoot /kubelet must exist in every v1 hierarchy (this machine is cgroup v1, hybrid).
for d in /sys/fs/cgroup/*/; do
  [[ -L "${d%/}" ]] && continue
  mkdir -p "${d}kubelet"
done

# containerd: the config with the local pause image, then the images themselves.
mkdir -p /etc/containerd /var/log
sed "s|@PAUSE_IMAGE@|${PAUSE_IMAGE}|" /etc/gpuplan/containerd.toml >/etc/containerd/config.toml
containerd >/var/log/containerd.log 2>&1 &
for _ in $(seq 100); do
  ctr version >/dev/null 2>&1 && break
  sleep 0.2
done
for tar in /images/*.tar; do
  [[ -e "${tar}" ]] || continue
  ctr -n k8s.io images import --no-unpack=false "${tar}" >/dev/null
done
log "containerd up; images: $(ctr -n k8s.io images ls -q | grep -c . || true)"

# Pod network: a bridge of this node's own (pods reach each other on the node and the node
# reaches them; masquerade to the outside through the node's own address).
mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/10-gpuplan.conflist <<CNI
{
  "cniVersion": "1.0.0",
  "name": "gpuplan",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "${POD_CIDR}"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
CNI

# The kubelet.
NODE_IP="$(ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}' 2>/dev/null ||
  hostname -i | awk '{print $1}')"
mkdir -p /var/lib/kubelet
cp /etc/gpuplan/kubelet.yaml /var/lib/kubelet/config.yaml
kubelet \
  --config=/var/lib/kubelet/config.yaml \
  --kubeconfig=/etc/kubernetes/kubeconfig \
  --hostname-override="${NODE_NAME}" \
  --node-ip="${NODE_IP}" \
  --node-labels="${NODE_LABELS}" \
  --register-with-taints="${NODE_TAINTS}" \
  --v=1 >/var/log/kubelet.log 2>&1 &
log "kubelet started (node ip ${NODE_IP})"

if ((GPUS > 0)); then
  fakegpu --count="${GPUS}" --node="${NODE_NAME}" >/var/log/fakegpu.log 2>&1 &
  log "fake GPU device plugin started (${GPUS} devices)"
fi

if ((${DRA_GPUS:-0} > 0)); then
  # It publishes the node's ResourceSlice with the kubeconfig's credentials, and registers with
  # the kubelet through /var/lib/kubelet/plugins_registry (retrying until the kubelet serves it).
  fakedra --driver="${DRA_DRIVER}" --node="${NODE_NAME}" --count="${DRA_GPUS}" \
    --domains="${DRA_DOMAINS}" --product="${DRA_PRODUCT}" --kubeconfig=/etc/kubernetes/kubeconfig >/var/log/fakedra.log 2>&1 &
  log "fake DRA kubelet plugin started (${DRA_GPUS} devices in ${DRA_DOMAINS} PCIe roots)"
fi

# PID 1 ignores signals it has no handler for: stop the node's processes on podman stop.
trap 'log "stopping"; kill $(jobs -p) 2>/dev/null; wait; exit 0' TERM INT

# Any of them exiting ends the node: kubelet-up.sh sees the container gone.
wait -n
log "a node process exited; last kubelet log lines:"
tail -n 20 /var/log/kubelet.log || true
exit 1

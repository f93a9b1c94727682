# shellcheck shell=bash
# shellcheck disable=SC2034  # variables are used by the scripts that source this file
# Pinned versions of the local control-plane harness (sourced by the hack/*.sh scripts).
#
# K8S_VERSION must match `require k8s.io/kubernetes` in hack/k8s/go.mod (its staging modules are
# replaced with v0.<minor>.<patch>), ETCD_VERSION must match hack/etcd/go.mod.
# v1.34.10 is the newest 1.34 patch whose checksum the Go checksum database (via the module proxy)
# serves here; v1.34.11/.12 exist on the proxy but sum.golang.org lookups 404 for them.

K8S_VERSION="v1.34.10"
ETCD_VERSION="v3.6.16"
KWOK_VERSION="v0.8.0"
# The real-kubelet nodes' containerd: the newest 1.7 the module proxy serves here. 1.7 injects CDI
# devices (which DRA drivers hand to containers; Debian bookworm's 1.6.20 cannot), still reads the
# version-2 configuration of 1.6 and runs on cgroup v1, which this machine has.
CONTAINERD_VERSION="v1.7.35"
# The CoreDNS of a kind node image made here (hack/kind/node-image.sh): the version kubeadm of
# K8S_VERSION deploys (`kubeadm config images list`).
COREDNS_VERSION="v1.12.1"

GPUPLAN_CACHE="${GPUPLAN_CACHE:-${HOME}/.cache/gpuplan}"
GPUPLAN_BIN_DIR="${GPUPLAN_CACHE}/k8s-${K8S_VERSION}/bin"

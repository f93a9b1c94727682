"""Node lists as ``kubectl get nodes -o json|yaml`` prints them, for the reading benchmark.

The planner reads a node's name, labels, taints, ``unschedulable`` and allocatable; a real Node
carries much more (annotations, conditions, addresses, nodeInfo, the images the kubelet holds),
and that is what a reader has to get through. Each node here has five conditions, three
addresses, its nodeInfo, two images and the usual labels: about 3.3 kB of JSON, so 65,000 of them
make about 213 MB. One node is rendered once per format and copied with its own name, address,
ids and free cards, so writing the file takes seconds, not minutes. Generated from a fixed seed.
"""

from __future__ import annotations

import json
import random
from typing import Any

import yaml

IMAGES = [
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.17.0"),
    ("registry.k8s.io/kube-proxy", "v1.31.4"),
]
CONDITIONS = [
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("NetworkUnavailable", "False", "CalicoIsUp", "Calico is running on this node"),
]
TIME = "2026-11-20T08:14:03Z"
# placeholders: plain words, so both dumpers leave them unquoted
NAME, TYPE, LOWER, ZONE, IP, UID, FREE = "xname", "xtype", "xlower", "xzone", "xip", "xuid", "xfree"
SHA = [f"xsha{i}" for i in range(len(IMAGES))]
INSTANCE, MACHINE, VERSION = "xinstance", "xmachine", "xversion"


def node_template() -> dict[str, Any]:
    """One Node as the API server returns it, with placeholders for what differs per node."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": TIME,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "gpuplan.ragnaros.io/gpu-type": TYPE,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": NAME,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": f"gpu-{LOWER}.16xlarge",
                "topology.kubernetes.io/zone": ZONE,
            },
            "name": NAME,
            "resourceVersion": VERSION,
            "uid": UID,
        },
        "spec": {"podCIDR": "100.64.0.0/24", "providerID": f"aws:///{ZONE}/{INSTANCE}"},
        "status": {
            "addresses": [
                {"address": IP, "type": "InternalIP"},
                {"address": NAME, "type": "Hostname"},
                {"address": f"{NAME}.ec2.internal", "type": "InternalDNS"},
            ],
            "allocatable": {"cpu": "63770m", "memory": "514871132Ki", "nvidia.com/gpu": FREE, "pods": "110"},
            "capacity": {"cpu": "64", "memory": "527827292Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                {
                    "lastHeartbeatTime": TIME,
                    "lastTransitionTime": TIME,
                    "message": message,
                    "reason": reason,
                    "status": status,
                    "type": kind,
                }
                for kind, status, reason, message in CONDITIONS
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [
                {"names": [f"{repo}@sha256:{sha}", f"{repo}:{tag}"], "sizeBytes": 104857600}
                for (repo, tag), sha in zip(IMAGES, SHA, strict=True)
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": UID,
                "containerRuntimeVersion": "containerd://1.7.24",
                "kernelVersion": "6.1.119-129.201.amzn2023.x86_64",
                "kubeletVersion": "v1.31.4",
                "machineID": MACHINE,
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023.6.20241212",
                "systemUUID": UID,
            },
        },
    }


def _values(i: int, typ: str, free: int, rng: random.Random, quote: str) -> dict[str, str]:
    uid = f"{rng.getrandbits(128):032x}"
    out = {
        NAME: f"{typ.lower()}-{i:05d}",
        TYPE: typ,
        LOWER: typ.lower(),
        ZONE: f"zone-{i % 3}",
        IP: f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
        UID: f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:]}",
        FREE: f"{quote}{free}{quote}",  # a string, as the API server writes quantities
        INSTANCE: f"i-{rng.getrandbits(68):017x}",
        MACHINE: f"{rng.getrandbits(128):032x}",
        VERSION: f"{quote}{rng.randrange(10**6, 10**8)}{quote}",
    }
    out |= {sha: f"{rng.getrandbits(256):064x}" for sha in SHA}
    return out


def _fill(template: str, values: dict[str, str]) -> str:
    # longest first: no placeholder is a prefix of a longer one's value
    for key in sorted(values, key=len, reverse=True):
        template = template.replace(key, values[key])
    return template


def write(path: str, per_type: dict[str, int], free: list[int], fmt: str, seed: int = 1) -> None:
    """``kubectl get nodes -o json`` (a List, four-space indents) or ``-o yaml`` (items as a block
    sequence at the left margin) for ``per_type`` nodes of each card type, ``free`` GPUs drawn."""
    doc = node_template()
    if fmt == "json":
        text = "\n        " + json.dumps(doc, indent=4).replace("\n", "\n        ")
        # placeholders of quoted strings in JSON keep the quotes the dump gave them
        quote, sep = "", ","
        head, tail = '{\n    "apiVersion": "v1",\n    "items": [', '\n    ],\n    "kind": "List",\n'
        tail += '    "metadata": {\n        "resourceVersion": ""\n    }\n}\n'
    else:
        dumped = yaml.safe_dump(doc, default_flow_style=False, width=10**6)
        text = "- " + dumped.rstrip("\n").replace("\n", "\n  ") + "\n"
        quote, sep = "'", ""
        head, tail = "apiVersion: v1\nitems:\n", 'kind: List\nmetadata:\n  resourceVersion: ""\n'
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head)
        first = True
        for typ, n in per_type.items():
            for i in range(n):
                f.write(("" if first else sep) + _fill(text, _values(i, typ, rng.choice(free), rng, quote)))
                first = False
        f.write(tail)

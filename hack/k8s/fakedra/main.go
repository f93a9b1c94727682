// Command fakedra is a DRA kubelet plugin for fake GPUs: it publishes a node's cards as a
// ResourceSlice with the topology attributes the planner reads, and when the kubelet prepares a
// ResourceClaim it writes a CDI spec that the container runtime (containerd with enable_cdi)
// turns into the container's view of exactly the claim's devices.
//
// Devices (one pool named after the node): gpu-0 .. gpu-<count-1>, in --domains equal
// consecutive groups, each carrying
//
//   - resource.kubernetes.io/pcieRoot  "pci<domain>:00" (the standard attribute; one per group),
//   - resource.kubernetes.io/numaNode  the group's number,
//   - index, uuid ("GPU-" + a UUIDv5 of driver/node/index), productName  (the driver's own).
//
// The e2e suite's kwok driver (e2e/dra.py) publishes the same shape, so the planner sees real and
// simulated nodes alike.
//
// NodePrepareResources: one CDI spec file per claim, <cdi-dir>/<driver>-<claim uid>.json, with
//
//   - GPUPLAN_DRA_DEVICES=gpu-2,gpu-3 and GPUPLAN_DRA_CLAIM=<namespace>/<name> (once per claim:
//     the spec's own edits, which the runtime applies once whichever of its devices it injects),
//   - one read-only file per device, /var/run/fakedra/<device>, holding "<device> <uuid> <pcieRoot>"
//     (each CDI device's edits),
//
// and the kubelet hands the CDI device names to the runtime. A device that another prepared claim
// already holds is refused (the driver is the last line of defence against a double allocation);
// the spec files are the driver's whole state, so a restarted plugin knows what is in use.
// NodeUnprepareResources removes the claim's file.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/google/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.driver, "driver", "gpu.kubelet.gpuplan.test", "the DRA driver's name")
	flag.StringVar(&cfg.node, "node", "", "node name, the pool's name (default: hostname)")
	flag.IntVar(&cfg.count, "count", 4, "number of fake devices")
	flag.IntVar(&cfg.domains, "domains", 2, "PCIe roots the devices are split into (equal groups)")
	flag.StringVar(&cfg.product, "product", "fake-L4", "the devices' productName")
	flag.StringVar(&cfg.cdiDir, "cdi-dir", "/var/run/cdi", "where CDI spec files are written (one of the runtime's cdi_spec_dirs)")
	flag.StringVar(&cfg.hostDir, "host-dir", "/var/run/fakedra", "directory for the per-device files")
	kubeconfig := flag.String("kubeconfig", "/etc/kubernetes/kubeconfig", "credentials for publishing ResourceSlices and reading claims")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(cfg, *kubeconfig); err != nil {
		klog.ErrorS(err, "fakedra failed")
		os.Exit(1)
	}
}

func run(cfg config, kubeconfig string) error {
	if cfg.node == "" {
		h, err := os.Hostname()
		if err != nil {
			return err
		}
		cfg.node = h
	}
	gpus, err := fakeGPUs(cfg.driver, cfg.node, cfg.count, cfg.domains, cfg.product)
	if err != nil {
		return err
	}
	for _, dir := range []string{cfg.cdiDir, cfg.hostDir, kubeletplugin.KubeletRegistryDir, filepath.Join(kubeletplugin.KubeletPluginsDir, cfg.driver)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for _, g := range gpus {
		if err := os.WriteFile(filepath.Join(cfg.hostDir, g.name), []byte(g.line()+"\n"), 0o644); err != nil {
			return err
		}
	}
	rest, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d := &driver{cfg: cfg, gpus: map[string]gpu{}}
	for _, g := range gpus {
		d.gpus[g.name] = g
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(cfg.node),
		kubeletplugin.DriverName(cfg.driver),
	)
	if err != nil {
		return fmt.Errorf("start the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: sliceDevices(gpus)}}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{cfg.node: pool}}); err != nil {
		return fmt.Errorf("publish the devices: %w", err)
	}
	klog.InfoS("serving", "driver", cfg.driver, "node", cfg.node, "devices", len(gpus), "domains", cfg.domains)
	<-ctx.Done()
	return nil
}

// uuidNamespace is e2e/dra.py's namespace of the devices' uuid5s: the same node and index give
// the same uuid in both drivers.
var uuidNamespace = uuid.MustParse("6c1f0a8e-2d0b-4e57-9a43-5b0f6b7f5e21")

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/uuid"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const (
	pcieRoot = "resource.kubernetes.io/pcieRoot"
	numaNode = "resource.kubernetes.io/numaNode"
	// cdiClass is the CDI kind's class: device ids are <driver>/gpu=<claim uid>-<device>.
	cdiClass = "gpu"
	// containerDir is where a container finds one file per device of its claim.
	containerDir = "/var/run/fakedra"
	// CDI 0.6.0: spec-level containerEdits and plain env/mounts, all that is used here.
	cdiVersion = "0.6.0"
)

type config struct {
	driver, node, product, cdiDir, hostDir string
	count, domains                         int
}

// gpu is one published device.
type gpu struct {
	name, uuid, pcieRoot string
	index, numa          int
	product              string
}

func (g gpu) line() string { return fmt.Sprintf("%s %s %s", g.name, g.uuid, g.pcieRoot) }

// fakeGPUs: count devices in domains equal consecutive groups (8 in 2: 0-3 and 4-7).
func fakeGPUs(driver, node string, count, domains int, product string) ([]gpu, error) {
	if count < 1 || domains < 1 || count%domains != 0 {
		return nil, fmt.Errorf("%d devices do not split into %d equal domains", count, domains)
	}
	per := count / domains
	out := make([]gpu, 0, count)
	for i := range count {
		out = append(out, gpu{
			name:     fmt.Sprintf("gpu-%d", i),
			uuid:     "GPU-" + uuid.NewSHA1(uuidNamespace, fmt.Appendf(nil, "%s/%s/%d", driver, node, i)).String(),
			pcieRoot: fmt.Sprintf("pci%04x:00", i/per),
			index:    i,
			numa:     i / per,
			product:  product,
		})
	}
	return out, nil
}

func sliceDevices(gpus []gpu) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, resourceapi.Device{
			Name: g.name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				pcieRoot:      {StringValue: ptr.To(g.pcieRoot)},
				numaNode:      {IntValue: ptr.To(int64(g.numa))},
				"index":       {IntValue: ptr.To(int64(g.index))},
				"uuid":        {StringValue: ptr.To(g.uuid)},
				"productName": {StringValue: ptr.To(g.product)},
			},
		})
	}
	return out
}

// The CDI spec format (github.com/cncf-tags/container-device-interface, specs-go), the part used.
type cdiSpec struct {
	Version        string      `json:"cdiVersion"`
	Kind           string      `json:"kind"`
	Devices        []cdiDevice `json:"devices"`
	ContainerEdits cdiEdits    `json:"containerEdits"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env    []string   `json:"env,omitempty"`
	Mounts []cdiMount `json:"mounts,omitempty"`
}

type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
}

type driver struct {
	cfg  config
	gpus map[string]gpu
	mu   sync.Mutex // one prepare or unprepare at a time (the helper serialises too)
}

func (d *driver) specPath(claim types.UID) string {
	return filepath.Join(d.cfg.cdiDir, fmt.Sprintf("%s-%s.json", d.cfg.driver, claim))
}

// claimSpec is the CDI spec of one claim's devices (in allocation order), and the CDI ids of each.
func (d *driver) claimSpec(claim *resourceapi.ResourceClaim, devices []string) (cdiSpec, map[string]string) {
	spec := cdiSpec{
		Version: cdiVersion,
		Kind:    d.cfg.driver + "/" + cdiClass,
		ContainerEdits: cdiEdits{Env: []string{
			"GPUPLAN_DRA_DEVICES=" + strings.Join(devices, ","),
			"GPUPLAN_DRA_CLAIM=" + claim.Namespace + "/" + claim.Name,
		}},
	}
	ids := map[string]string{}
	for _, name := range devices {
		cdiName := fmt.Sprintf("%s-%s", claim.UID, name)
		spec.Devices = append(spec.Devices, cdiDevice{
			Name: cdiName,
			ContainerEdits: cdiEdits{Mounts: []cdiMount{{
				HostPath:      filepath.Join(d.cfg.hostDir, name),
				ContainerPath: filepath.Join(containerDir, name),
				Options:       []string{"ro", "nosuid", "nodev", "bind"},
			}}},
		})
		ids[name] = spec.Kind + "=" + cdiName
	}
	return spec, ids
}

// inUse: device -> the claim uid whose spec file holds it, from the spec files on disk.
func (d *driver) inUse() (map[string]types.UID, error) {
	files, err := filepath.Glob(filepath.Join(d.cfg.cdiDir, d.cfg.driver+"-*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string]types.UID{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var spec cdiSpec
		if err := json.Unmarshal(data, &spec); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		uid := types.UID(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), d.cfg.driver+"-"), ".json"))
		for _, dev := range spec.Devices {
			out[strings.TrimPrefix(dev.Name, string(uid)+"-")] = uid
		}
	}
	return out, nil
}

// prepare one claim: its devices of this driver on this node, checked and written as a CDI spec.
func (d *driver) prepare(claim *resourceapi.ResourceClaim, used map[string]types.UID) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	var names []string
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.cfg.driver {
			continue
		}
		if r.Pool != d.cfg.node {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("device %s of pool %s is not on node %s", r.Device, r.Pool, d.cfg.node)}
		}
		if _, ok := d.gpus[r.Device]; !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("unknown device %s", r.Device)}
		}
		if holder, ok := used[r.Device]; ok && holder != claim.UID {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("device %s is prepared for claim %s already", r.Device, holder)}
		}
		names = append(names, r.Device)
		results = append(results, r)
	}
	spec, ids := d.claimSpec(claim, names)
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	// Written whole and renamed: the runtime watches the directory and must never read half a spec.
	tmp := d.specPath(claim.UID) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	if err := os.Rename(tmp, d.specPath(claim.UID)); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	out := kubeletplugin.PrepareResult{}
	for _, r := range results {
		out.Devices = append(out.Devices, kubeletplugin.Device{
			Requests:     []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CDIDeviceIDs: []string{ids[r.Device]},
		})
		used[r.Device] = claim.UID
	}
	klog.InfoS("prepared", "claim", klog.KObj(claim), "uid", claim.UID, "devices", names)
	return out
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	used, err := d.inUse()
	if err != nil {
		return nil, err
	}
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		out[c.UID] = d.prepare(c, used)
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		err := os.Remove(d.specPath(c.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil // unprepare is idempotent
		}
		out[c.UID] = err
		klog.InfoS("unprepared", "claim", c.NamespacedName, "uid", c.UID, "err", err)
	}
	return out, nil
}

// HandleError: publishing errors are retried by the helper; they are only logged here.
func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
}

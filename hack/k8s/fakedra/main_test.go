package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

func testDriver(t *testing.T) *driver {
	t.Helper()
	cfg := config{driver: "gpu.test", node: "n1", count: 4, domains: 2, product: "p", cdiDir: t.TempDir(), hostDir: "/host/fakedra"}
	gpus, err := fakeGPUs(cfg.driver, cfg.node, cfg.count, cfg.domains, cfg.product)
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{cfg: cfg, gpus: map[string]gpu{}}
	for _, g := range gpus {
		d.gpus[g.name] = g
	}
	return d
}

func claim(uid, name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

func dev(driver, pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: driver, Pool: pool, Device: device}
}

// Devices split into equal consecutive PCIe roots, with distinct uuids; an uneven split is refused.
func TestFakeGPUsSplitIntoDomains(t *testing.T) {
	gpus, err := fakeGPUs("d", "n", 8, 2, "p")
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string][]int{}
	uuids := map[string]bool{}
	for _, g := range gpus {
		roots[g.pcieRoot] = append(roots[g.pcieRoot], g.index)
		uuids[g.uuid] = true
	}
	want := map[string][]int{"pci0000:00": {0, 1, 2, 3}, "pci0001:00": {4, 5, 6, 7}}
	if !reflect.DeepEqual(roots, want) || len(uuids) != 8 {
		t.Fatalf("domains %v, %d uuids", roots, len(uuids))
	}
	if _, err := fakeGPUs("d", "n", 6, 4, "p"); err == nil {
		t.Fatal("6 devices in 4 domains accepted")
	}
	attrs := sliceDevices(gpus[5:6])[0].Attributes
	if *attrs[pcieRoot].StringValue != "pci0001:00" || *attrs[numaNode].IntValue != 1 || *attrs["index"].IntValue != 5 {
		t.Fatalf("attributes %+v", attrs)
	}
}

// A prepared claim gets one CDI device per allocated device (this driver's only) and one spec
// file whose edits name exactly those devices; preparing again is the same answer.
func TestPrepareWritesTheClaimsDevicesOnly(t *testing.T) {
	d := testDriver(t)
	c := claim("u1", "c1", dev("gpu.test", "n1", "gpu-3"), dev("other.driver", "n1", "x"), dev("gpu.test", "n1", "gpu-2"))
	for range 2 {
		res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{c})
		if err != nil || res["u1"].Err != nil {
			t.Fatal(err, res["u1"].Err)
		}
		want := []kubeletplugin.Device{
			{Requests: []string{"gpus"}, PoolName: "n1", DeviceName: "gpu-3", CDIDeviceIDs: []string{"gpu.test/gpu=u1-gpu-3"}},
			{Requests: []string{"gpus"}, PoolName: "n1", DeviceName: "gpu-2", CDIDeviceIDs: []string{"gpu.test/gpu=u1-gpu-2"}},
		}
		if !reflect.DeepEqual(res["u1"].Devices, want) {
			t.Fatalf("devices %+v", res["u1"].Devices)
		}
	}
	data, err := os.ReadFile(filepath.Join(d.cfg.cdiDir, "gpu.test-u1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdiSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "gpu.test/gpu" || !reflect.DeepEqual(spec.ContainerEdits.Env, []string{"GPUPLAN_DRA_DEVICES=gpu-3,gpu-2", "GPUPLAN_DRA_CLAIM=ns/c1"}) {
		t.Fatalf("spec %s", data)
	}
	if got := sortedNames(spec); !reflect.DeepEqual(got, []string{"u1-gpu-2", "u1-gpu-3"}) {
		t.Fatalf("cdi devices %v", got)
	}
	m := spec.Devices[0].ContainerEdits.Mounts[0]
	if m.HostPath != "/host/fakedra/gpu-3" || m.ContainerPath != "/var/run/fakedra/gpu-3" {
		t.Fatalf("mount %+v", m)
	}
}

// A device another prepared claim holds is refused, also after a restart (the spec files are the
// state); unpreparing frees it, and unpreparing twice is fine.
func TestADeviceIsNeverPreparedForTwoClaims(t *testing.T) {
	d := testDriver(t)
	if res, _ := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{claim("u1", "c1", dev("gpu.test", "n1", "gpu-0"))}); res["u1"].Err != nil {
		t.Fatal(res["u1"].Err)
	}
	restarted := testDriver(t)
	restarted.cfg.cdiDir = d.cfg.cdiDir
	second := claim("u2", "c2", dev("gpu.test", "n1", "gpu-1"), dev("gpu.test", "n1", "gpu-0"))
	res, err := restarted.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{second})
	if err != nil || res["u2"].Err == nil || !strings.Contains(res["u2"].Err.Error(), "gpu-0 is prepared for claim u1") {
		t.Fatalf("double preparation: %v %v", err, res["u2"].Err)
	}
	for range 2 {
		out, err := restarted.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{UID: "u1"}})
		if err != nil || out["u1"] != nil {
			t.Fatal(err, out["u1"])
		}
	}
	if res, _ := restarted.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{second}); res["u2"].Err != nil {
		t.Fatal(res["u2"].Err)
	}
}

// Devices of another node's pool, unknown devices and unallocated claims are errors.
func TestPrepareRefusesForeignDevices(t *testing.T) {
	d := testDriver(t)
	unallocated := claim("u3", "c3")
	unallocated.Status.Allocation = nil
	for _, c := range []*resourceapi.ResourceClaim{
		claim("u1", "c1", dev("gpu.test", "n2", "gpu-0")),
		claim("u2", "c2", dev("gpu.test", "n1", "gpu-9")),
		unallocated,
	} {
		res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{c})
		if err != nil || res[c.UID].Err == nil {
			t.Fatalf("%s prepared: %+v", c.Name, res[c.UID])
		}
	}
	if files, _ := filepath.Glob(filepath.Join(d.cfg.cdiDir, "*")); len(files) != 0 {
		t.Fatalf("spec files written: %v", files)
	}
}

// sortedNames: the CDI device names of a spec, sorted.
func sortedNames(spec cdiSpec) []string {
	out := make([]string, 0, len(spec.Devices))
	for _, d := range spec.Devices {
		out = append(out, d.Name)
	}
	sort.Strings(out)
	return out
}

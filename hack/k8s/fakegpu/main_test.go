package main

import (
	"context"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func testPlugin() *plugin {
	p := &plugin{hostDir: "/var/run/fakegpu"}
	for _, id := range []string{"n-gpu-0", "n-gpu-1", "n-gpu-2"} {
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	return p
}

// Each container gets exactly the devices the kubelet chose for it: in the variable, in the
// kubelet's order, and as one read-only file each.
func TestAllocateHandsEachContainerItsDevices(t *testing.T) {
	resp, err := testPlugin().Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{
			{DevicesIds: []string{"n-gpu-2", "n-gpu-0"}},
			{DevicesIds: []string{"n-gpu-1"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("want 2 container responses, got %d", len(resp.ContainerResponses))
	}
	first, second := resp.ContainerResponses[0], resp.ContainerResponses[1]
	if got := first.Envs["NVIDIA_VISIBLE_DEVICES"]; got != "n-gpu-2,n-gpu-0" {
		t.Errorf("first container: NVIDIA_VISIBLE_DEVICES=%q", got)
	}
	if got := second.Envs["NVIDIA_VISIBLE_DEVICES"]; got != "n-gpu-1" {
		t.Errorf("second container: NVIDIA_VISIBLE_DEVICES=%q", got)
	}
	if len(first.Mounts) != 2 || first.Mounts[0].ContainerPath != "/var/run/fakegpu/n-gpu-2" ||
		first.Mounts[0].HostPath != "/var/run/fakegpu/n-gpu-2" || !first.Mounts[0].ReadOnly {
		t.Errorf("first container mounts: %v", first.Mounts)
	}
}

// A device the plugin never listed is an error, not a silent empty grant.
func TestAllocateRefusesUnknownDevices(t *testing.T) {
	_, err := testPlugin().Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"other-gpu-0"}}},
	})
	if err == nil || !strings.Contains(err.Error(), "other-gpu-0") {
		t.Fatalf("want an error naming other-gpu-0, got %v", err)
	}
}

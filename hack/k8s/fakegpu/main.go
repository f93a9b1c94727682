// Command fakegpu is a device plugin for the kubelet's device manager that advertises fake GPUs
// as nvidia.com/gpu, so that a real kubelet admits, counts and hands out cards exactly as it does
// on a GPU node, with no GPU behind them.
//
// It registers with the kubelet over /var/lib/kubelet/device-plugins/kubelet.sock, lists
// --count healthy devices named <node>-gpu-<i>, and for every container the kubelet allocates
// devices to, answers with
//
//   - NVIDIA_VISIBLE_DEVICES=<id>,<id>,...  (the environment variable NVIDIA's runtime reads), and
//   - one read-only file per device, /var/run/fakegpu/<id>, mounted from the node (it holds the id),
//
// so a test can read from inside the container which devices it was given. The kubelet restarts
// (and deletes every plugin socket when it does): the plugin watches its own socket and the
// kubelet's, and serves and registers again when either changes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	hostDir string // where the per-device files live on the node
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once; they never change health. The stream stays open until
// the kubelet closes it (closing it would tell the kubelet the devices are gone).
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range p.devices {
		known[d.ID] = true
	}
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		out := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")},
		}
		for _, id := range c.DevicesIds {
			if !known[id] {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			out.Mounts = append(out.Mounts, &pluginapi.Mount{
				ContainerPath: "/var/run/fakegpu/" + id,
				HostPath:      filepath.Join(p.hostDir, id),
				ReadOnly:      true,
			})
		}
		log.Printf("allocate %v", c.DevicesIds)
		resp.ContainerResponses = append(resp.ContainerResponses, out)
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// inode of a path, 0 when it does not exist: a new kubelet makes a new kubelet.sock.
func inode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// serve listens on the plugin's socket and registers with the kubelet; it returns the server
// and the inodes to watch.
func serve(p *plugin, dir, endpoint, resource string) (*grpc.Server, error) {
	sock := filepath.Join(dir, endpoint)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
	})
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register with the kubelet: %w", err)
	}
	return srv, nil
}

func main() {
	count := flag.Int("count", 4, "number of fake devices")
	node := flag.String("node", "", "node name, the prefix of the device ids (default: hostname)")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	hostDir := flag.String("host-dir", "/var/run/fakegpu", "directory for the per-device files")
	flag.Parse()
	if *node == "" {
		h, err := os.Hostname()
		if err != nil {
			log.Fatal(err)
		}
		*node = h
	}
	if err := os.MkdirAll(*hostDir, 0o755); err != nil {
		log.Fatal(err)
	}
	p := &plugin{hostDir: *hostDir}
	for i := 0; i < *count; i++ {
		id := fmt.Sprintf("%s-gpu-%d", *node, i)
		if err := os.WriteFile(filepath.Join(*hostDir, id), []byte(id+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	endpoint := "fakegpu.sock"
	kubeletSock := filepath.Join(*dir, "kubelet.sock")
	ownSock := filepath.Join(*dir, endpoint)
	var srv *grpc.Server
	var kubeletIno, ownIno uint64
	for {
		if srv != nil && inode(kubeletSock) == kubeletIno && inode(ownSock) == ownIno {
			time.Sleep(time.Second)
			continue
		}
		if srv != nil {
			log.Printf("kubelet or plugin socket changed; registering again")
			srv.Stop()
			srv = nil
		}
		if inode(kubeletSock) == 0 {
			time.Sleep(time.Second)
			continue
		}
		s, err := serve(p, *dir, endpoint, *resource)
		if err != nil {
			log.Printf("%v; retrying", err)
			time.Sleep(time.Second)
			continue
		}
		srv, kubeletIno, ownIno = s, inode(kubeletSock), inode(ownSock)
		log.Printf("registered %d devices of %s with the kubelet", len(p.devices), *resource)
	}
}

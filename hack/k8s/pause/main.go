// Command pause is the pod sandbox's process for the real-kubelet nodes: it holds the pod's
// namespaces and does nothing else, like the upstream pause image (which nobody can pull here).
// Built static, it is the only file of the localhost pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the sandbox it also reaps orphans; SIGCHLD is left to the default (ignored
	// children are reaped by the kernel when the disposition is SIG_IGN).
	signal.Ignore(syscall.SIGCHLD)
	<-sig
}

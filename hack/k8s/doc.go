// Package k8s is an empty wrapper: it only exists so that `go build` can
// resolve k8s.io/kubernetes with its staging modules taken from the module proxy.
package k8s

// Package etcd is an empty wrapper: it only exists so that `go build` can
// resolve go.etcd.io/etcd/server/v3 with its sibling modules from the module proxy.
package etcd

//go:build tools

// Package tools pins the etcd server and etcdctl main packages as dependencies of this module.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)

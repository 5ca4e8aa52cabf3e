//go:build tools

// Package tools pins the kube-apiserver main package as a dependency of this module.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"

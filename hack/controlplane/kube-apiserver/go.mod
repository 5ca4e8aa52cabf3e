// Throwaway module whose only purpose is to build k8s.io/kubernetes/cmd/kube-apiserver.
// build.sh adds a `replace` for every staging module, read from k8s.io/kubernetes's own
// go.mod at the pinned version, so this file stays short and never goes stale.
module local/kube-apiserver-bin

go 1.26.0

godebug default=go1.26

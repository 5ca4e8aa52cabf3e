// Throwaway module whose only purpose is to build Kubernetes' own binaries from
// k8s.io/kubernetes: kube-apiserver always, and the kind node image's (kubelet, kubeadm,
// kube-scheduler, kube-controller-manager, kube-proxy) with `build.sh --node`, in one
// `go build`, so the packages they share compile once. build.sh writes tools.go importing the
// commands it builds (so `go mod tidy` resolves only theirs) and adds a `replace` for every
// staging module, read from k8s.io/kubernetes's own go.mod at the pinned version, so this
// file stays short and never goes stale.
module local/kubernetes-bin

go 1.26.0

godebug default=go1.26

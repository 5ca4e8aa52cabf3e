// Throwaway module that builds etcd and etcdctl. Kept apart from kube-apiserver's module so
// minimal version selection cannot bump the etcd client that kube-apiserver was released with.
module local/etcd-bin

go 1.26.0

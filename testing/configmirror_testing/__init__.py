"""What configmirror's tests, benchmarks and `make demo` share, outside the shipped wheel.

- `controlplane`: a real etcd + kube-apiserver (like controller-runtime's envtest), on
  loopback or on an address containers reach
- `operator`: `configmirror run` as a subprocess, its probes and its /metrics
- `scrape`: one parser of the Prometheus text format, with an atomic "idle" reading
- `wait`: one `wait_for(condition, timeout)` with a deadline
- `objects`: ConfigMap bodies, and kubeconfigs holding only one ServiceAccount's token
- `pod`: a Deployment's pod run by Docker the way a kubelet runs it (the image's tests)
- `kind`: kind clusters for the node tier (our node image, hack/kind/cluster.yaml), a
  registry of a test's own for their nodes, and the clean-up of a killed run's clusters
- `deployed`: an operator a cluster runs (its rollout, leader and /metrics, via the API)
- `faultproxy`: a TCP proxy on 127.0.0.1 that drops, resets, delays and black-holes
  connections on demand; `overload`: API Priority and Fairness objects that leave one
  ServiceAccount a single seat (429 for the rest)
- `certs`: a CA, server and client certificates (and an encrypted key) made by a test
- `localserver`: a test's own HTTP(S) server on 127.0.0.1
"""

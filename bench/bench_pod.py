"""The image as deploy/'s pod: `docker run` to ready, and memory with 10,000 ConfigMaps.

    python bench/bench_pod.py [--image configmirror:0.1.0] [--starts 5]
                              [--configmaps 10000] [--namespaces 50]

The pod is the one `kubectl kustomize deploy/` renders, run in Docker by
configmirror_testing.pod as tests/image/test_pod.py runs it (read-only root, non-root, the
256 MiB limit, in-cluster config), against a local control plane on a Docker network's gateway.
  start   seconds from `docker run` to the readiness probe's first ok, on an empty cluster
  memory  10,000 ConfigMaps of ~1 KiB (bench_memory.py's "plain" case): the pod's RSS once it
          has synced and gone idle, beside `configmirror run` from the venv on the same cluster
Needs Docker and the image (`make image`).
"""

from __future__ import annotations

import secrets
import statistics
import tempfile
from pathlib import Path

import yaml
from kubernetes import client, config

from bench_memory import json_size
from configmirror_testing.controlplane import ControlPlane, find_assets
from configmirror_testing.objects import service_account_token
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.pod import Network, Pod, PodTemplate, ServiceAccountVolume
from harness import REPO, RESULTS, BenchCluster, common_args, parallel, peak_rss_of, wait

MIB = 1024 * 1024


class PodBench:
    """A control plane the pods reach, deploy/ applied, and pods started from its template."""

    def __init__(self, image: str, folder: Path) -> None:
        self.image = image
        self.folder = folder
        self.network = Network(f"configmirror-bench-{secrets.token_hex(3)}")
        assets = find_assets(REPO, build=True)
        assert assets is not None, "no control plane: run `make controlplane`"
        self.plane = ControlPlane(assets, address=self.network.gateway)
        self.plane.start()
        self.plane.kubectl("apply", "-k", str(REPO / "deploy"))
        rendered = self.plane.kubectl("kustomize", str(REPO / "deploy")).stdout
        self.template = PodTemplate.from_manifests(
            [d for d in yaml.safe_load_all(rendered) if d], "configmirror")
        self.cluster = BenchCluster(str(self.plane.kubeconfig))
        self.pods: list[Pod] = []

    def pod(self) -> Pod:
        # A TokenRequest token through the official client, as the tests get one.
        core = client.CoreV1Api(config.new_client_from_config(str(self.plane.kubeconfig)))
        token = service_account_token(core, self.template.namespace,
                                      self.template.service_account, create=False)
        name = f"configmirror-bench-{secrets.token_hex(3)}"
        volume = ServiceAccountVolume(self.folder / name, token, self.plane.ca_file.read_bytes(),
                                      self.template.namespace)
        pod = Pod(self.template, self.image, name, self.network, volume,
                  (self.network.gateway, self.plane.apiserver_port))
        self.pods.append(pod)
        return pod

    def close(self) -> None:
        try:
            for pod in self.pods:
                try:
                    if pod.running():
                        pod.stop()
                finally:
                    pod.remove()
        finally:
            self.cluster.close()
            self.plane.stop()
            self.network.remove()


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--image", default=None, help="default: what `make image` builds")
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=50)
    args = parser.parse_args()
    from configmirror import __version__

    image = args.image or f"configmirror:{__version__}"
    with tempfile.TemporaryDirectory(prefix="configmirror-bench-pod-") as tmp:
        bench = PodBench(image, Path(tmp))
        try:
            starts = []
            for _ in range(args.starts):
                pod = bench.pod()
                starts.append(pod.wait_ready())
                pod.stop()
                pod.remove()
                bench.pods.remove(pod)
            print(f"pod: docker run -> /readyz ok: median {statistics.median(starts):.2f} s "
                  f"(min {min(starts):.2f}, max {max(starts):.2f}, {len(starts)} starts)")

            targets = bench.cluster.namespaces("mem", args.namespaces)
            per_ns = args.configmaps // len(targets)
            parallel(lambda p: bench.cluster.kube.request(
                "create", f"/api/v1/namespaces/{p[0]}/configmaps",
                body={"metadata": {"name": f"plain-{p[1]:04d}", "labels": {"app": "bench"}},
                      "data": {"payload": "y" * 900}}),
                [(ns, i) for ns in targets for i in range(per_ns)], 8)
            objects, size = json_size(bench.cluster, None)

            pod = bench.pod()
            ready = pod.wait_ready(timeout=300)
            wait(lambda: pod.metric("configmirror_informer_relists_total") >= 2, 120, "sync")
            wait(lambda: pod.scrape().idle(), 120, "idle")
            pod_rss, pod_peak = pod.rss_bytes(), int(pod.status()["VmHWM"].split()[0]) * 1024

            host = OperatorProcess(bench.plane.kubeconfig, RESULTS / "bench_pod_operator.log",
                                   "--log-level", "warning")
            try:
                host.wait_ready(300)
                wait(lambda: host.metric("configmirror_informer_relists_total") >= 2, 120,
                     "sync")
                host.wait_idle(120)
                host_rss, host_peak = host.rss_bytes(), peak_rss_of(host.pid)
            finally:
                host.stop()
            print(f"pod: {objects} ConfigMaps, JSON {size / MIB:.1f} MiB; ready after "
                  f"{ready:.1f} s; RSS {pod_rss / MIB:.1f} MiB (peak {pod_peak / MIB:.1f}) "
                  f"of a {pod.inspect()['HostConfig']['Memory'] / MIB:.0f} MiB limit")
            print(f"     `configmirror run` from the venv, same cluster: RSS "
                  f"{host_rss / MIB:.1f} MiB (peak {host_peak / MIB:.1f})")
        finally:
            bench.close()


if __name__ == "__main__":
    main()

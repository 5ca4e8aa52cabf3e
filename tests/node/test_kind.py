"""The node tier's kind cluster itself (configmirror_testing.kind, hack/kind/): our node image
runs our own Kubernetes build and needs no registry, and a test can give the node a registry of
its own on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from configmirror_testing.cluster import REPO, Cluster, missing
from configmirror_testing.controlplane import free_port, spawn, stop_process
from configmirror_testing.e2e import events
from configmirror_testing.kind import KindCluster, owned_name, remove_orphans
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]


def pinned(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a versions.env."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line and not line.startswith("#"))


VERSIONS = {**pinned(REPO / "hack" / "controlplane" / "versions.env"),
            **pinned(REPO / "hack" / "kind" / "versions.env")}


@pytest.fixture(scope="module")
def cluster(node_cluster: Cluster) -> Cluster:
    return node_cluster


@pytest.fixture(scope="module")
def kind(cluster: Cluster) -> KindCluster:
    assert cluster.node is not None
    return cluster.node


def test_our_node_image_runs_our_kubernetes_build_and_pulled_no_image(
        cluster: Cluster, kind: KindCluster) -> None:
    if "configmirror-kind-node:" not in (kind.image or ""):
        missing(f"the node image is {kind.image}, not ours (make kind-node-image)")
    version = f"v{VERSIONS['KUBERNETES_VERSION']}"
    [node] = cluster.core.list_node().items
    assert node.status.node_info.kubelet_version == version
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    expected = {
        "kube-apiserver": f"registry.k8s.io/kube-apiserver:{version}",
        "kube-controller-manager": f"registry.k8s.io/kube-controller-manager:{version}",
        "kube-scheduler": f"registry.k8s.io/kube-scheduler:{version}",
        "kube-proxy": f"registry.k8s.io/kube-proxy:{version}",
        "etcd": f"registry.k8s.io/etcd:{VERSIONS['ETCD_VERSION']}-0",
        "coredns": f"registry.k8s.io/coredns/coredns:v{VERSIONS['COREDNS_VERSION']}",
    }

    def running() -> dict[str, str] | None:
        pods = cluster.core.list_namespaced_pod("kube-system").items
        ready = {c.name: c.image for p in pods for c in (p.status.container_statuses or [])
                 if c.ready}
        return ready if set(expected) <= set(ready) else None

    images = wait_for(running, 120, "every kube-system component Ready")
    for name, image in expected.items():
        assert images[name] == image, (name, images[name])
    # Every image was on the node already: the kubelet pulled nothing (no registry here).
    pulling = cluster.core.list_namespaced_event("kube-system",
                                                 field_selector="reason=Pulling").items
    assert not pulling, [e.message for e in pulling]


def test_a_pod_resolves_services_through_the_clusters_coredns(
        cluster: Cluster, image: str, namespace: str) -> None:
    """The cluster DNS answers a pod: the API server's Service by its short name (through the
    pod's search path) and its full name, and a name under cluster.local that does not exist
    is refused (the kubernetes plugin is authoritative there, nothing is forwarded). On our
    node image, CoreDNS has only the plugins of kubeadm's Corefile (hack/kind/coredns.sh)."""
    names = ["kubernetes.default", "kubernetes.default.svc.cluster.local"]
    script = (
        "import socket, sys\n"
        f"for name in {names!r}:\n"
        "    print(name, socket.gethostbyname(name))\n"
        "try:\n"
        "    socket.gethostbyname('no-such-service.default.svc.cluster.local')\n"
        "except socket.gaierror as err:\n"
        "    print('refused', err.errno == socket.EAI_NONAME)\n"
        "else:\n"
        "    sys.exit('no-such-service resolved')\n")
    cluster.core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="resolve"),
        spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(
            name="resolve", image=image, image_pull_policy="Never",
            command=["python3", "-c", script])])))

    def finished() -> str | None:
        phase = cluster.core.read_namespaced_pod("resolve", namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, 120, "the resolving pod to finish")
    log = cluster.core.read_namespaced_pod_log("resolve", namespace)
    assert phase == "Succeeded", log
    service_ip = cluster.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    assert log.splitlines() == [*(f"{name} {service_ip}" for name in names), "refused True"], log


def test_pods_pull_their_images_from_a_plain_http_registry_on_this_machine(
        cluster: Cluster, kind: KindCluster, image: str, namespace: str,
        tmp_path: Path) -> None:
    """The way a test (issue 29's) gives the node a registry: one on this machine, reached at
    the kind network's gateway, over plain HTTP (use_registry writes the node's hosts.toml).
    Named by the gateway's address, or by 127.0.0.1 (what a release pushed there names) with
    the gateway as the node's mirror for it."""
    registry = shutil.which("docker-registry")
    if registry is None:
        missing("no docker-registry (apt-get install docker-registry)")
    port = free_port("0.0.0.0")
    config = tmp_path / "registry.json"  # YAML's superset: JSON is a registry config
    config.write_text(json.dumps({
        "version": 0.1, "storage": {"filesystem": {"rootdirectory": str(tmp_path / "data")}},
        # All addresses: the nodes reach it at the gateway, docker pushes to 127.0.0.1 (which it
        # allows over plain HTTP). This machine has no other network.
        "http": {"addr": f"0.0.0.0:{port}"}, "log": {"level": "warn"}}))
    proc = spawn([registry, "serve", str(config)], tmp_path / "registry.log")
    pushed = f"127.0.0.1:{port}/configmirror:kind-registry-test"
    try:
        wait_for(lambda: registry_answers(port), 30, "the registry to answer",
                 abort=lambda: None if proc.poll() is None else
                 (tmp_path / "registry.log").read_text())
        docker("tag", image, pushed)
        docker("push", pushed)
        address = f"{kind.host_address}:{port}"
        kind.use_registry(address)
        kind.use_registry(f"127.0.0.1:{port}", f"http://{address}")
        for pod, ref in (("by-gateway", f"{address}/configmirror:kind-registry-test"),
                         ("by-loopback", pushed)):
            cluster.core.create_namespaced_pod(namespace, client.V1Pod(
                metadata=client.V1ObjectMeta(name=pod),
                spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(
                    name="configmirror", image=ref, image_pull_policy="Always",
                    args=["version"])])))
        for pod in ("by-gateway", "by-loopback"):
            wait_for(lambda pod=pod: cluster.core.read_namespaced_pod(  # type: ignore[misc]
                pod, namespace).status.phase == "Succeeded", 120,
                f"pod {pod} to pull its image from the registry and run")
            pulls = [e.message for e in events(cluster, namespace, pod, "Pulled")]
            assert any("Successfully pulled" in m for m in pulls), pulls
            log = cluster.core.read_namespaced_pod_log(pod, namespace)
            assert log.strip(), f"configmirror version printed nothing in {pod}"
    finally:
        docker("rmi", pushed, check=False)
        stop_process(proc)


def test_a_cluster_whose_owner_is_gone_is_deleted_and_a_live_owners_is_kept(
        kind: KindCluster) -> None:
    """What a killed run leaves (its node containers, still running) goes with the next run.
    A stand-in node is enough: kind finds a cluster's nodes by their label, and deletes them."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = f"cm-orphan-test-{gone.pid}-abcd"
    live = owned_name("cm-orphan-test")
    for name in (orphan, live):
        kind.engine("run", "--detach", "--name", f"{name}-control-plane",
                    "--label", f"io.x-k8s.kind.cluster={name}", "--entrypoint", "sleep",
                    kind.image or "", "infinity")
    try:
        assert remove_orphans(kind.kind, "cm-orphan-test", kind.env) == [orphan]
        left = subprocess.run([str(kind.kind), "get", "clusters"], capture_output=True,
                              text=True, timeout=60, check=True,
                              env={**os.environ, **kind.env}).stdout.split()
        assert orphan not in left and live in left, left
        assert kind.name in left  # not named by owned_name("cm-orphan-test"): untouched
    finally:
        for name in (orphan, live):
            subprocess.run([kind.provider, "rm", "--force", f"{name}-control-plane"],
                           capture_output=True, timeout=120, check=False,
                           env={**os.environ, **kind.env})


# -- helpers ------------------------------------------------------------------------------------

def docker(*args: str, check: bool = True) -> None:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300,
                          check=False)
    assert not check or done.returncode == 0, done.stderr


def registry_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False

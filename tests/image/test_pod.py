"""The image, run the way deploy/'s pod runs it: in-cluster config, the pod's security context
and limits, its probes, SIGTERM, leader election, a rotated token.

No kubelet runs here, so configmirror_testing.pod plays its part for the Deployment that
`kubectl kustomize deploy/` renders (args, env, security context, limits, ports, probes, grace
period; nothing restated here), mounting a TokenRequest token of deploy/'s ServiceAccount,
`ca.crt` and `namespace` where a kubelet mounts them. The apiserver is this module's own, on
the gateway of an internal Docker network, with a serving certificate for that address that
the pods verify against the mounted `ca.crt`, as in a cluster.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.cluster import REPO, Cluster, Namespaces, require_docker, start_plane
from configmirror_testing.e2e import read
from configmirror_testing.objects import configmap, service_account_token
from configmirror_testing.pod import (
    Network,
    Pod,
    PodTemplate,
    ServiceAccountVolume,
    docker,
    memory_bytes,
)
from configmirror_testing.wait import wait_for

# The first test's setup may build the image from nothing (a base from Debian's packages,
# then the wheels): minutes, which the default per-test timeout does not cover.
pytestmark = [pytest.mark.controlplane, pytest.mark.docker, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    require_docker()
    net = Network(f"configmirror-e2e-{secrets.token_hex(3)}")
    try:
        yield net
    finally:
        net.remove()


@pytest.fixture(scope="module")
def cluster(network: Network) -> Iterator[Cluster]:
    """A control plane the pods can reach (on the network's gateway), with deploy/ applied."""
    if os.environ.get("CONFIGMIRROR_E2E_KUBECONFIG"):
        pytest.skip("runs its own apiserver for the containers, not an external cluster")
    plane = start_plane(address=network.gateway)
    try:
        plane.kubectl("apply", "-k", str(REPO / "deploy"))
        yield Cluster(plane.kubeconfig, plane)
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def manifests(cluster: Cluster) -> list[dict[str, Any]]:
    rendered = cluster.require_plane().kubectl("kustomize", str(REPO / "deploy")).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


@pytest.fixture(scope="module")
def template(manifests: list[dict[str, Any]]) -> PodTemplate:
    return PodTemplate.from_manifests(manifests, "configmirror")


class Pods:
    """Starts deploy/'s pod as containers for one test; stops (SIGTERM) and removes them."""

    def __init__(self, cluster: Cluster, template: PodTemplate, image: str, network: Network,
                 folder: Path) -> None:
        self.cluster = cluster
        self.plane = cluster.require_plane()
        self.template = template
        self.image = image
        self.network = network
        self.folder = folder
        self.started: list[Pod] = []

    def __call__(self, token: str | None = None, ca: bytes | None = None,
                 writable_root: bool = False, wait: bool = True) -> Pod:
        name = f"configmirror-{secrets.token_hex(3)}"
        volume = ServiceAccountVolume(
            self.folder / name, token or self.token(self.template.service_account),
            ca or self.plane.ca_file.read_bytes(), self.template.namespace)
        pod = Pod(self.template, self.image, name, self.network, volume,
                  (self.network.gateway, self.plane.apiserver_port), writable_root)
        self.started.append(pod)
        if wait:
            pod.wait_ready()
        return pod

    def token(self, service_account: str) -> str:
        """A TokenRequest token, as the kubelet asks for one."""
        return service_account_token(self.cluster.core, self.template.namespace,
                                     service_account, create=False)

    def cleanup(self) -> None:
        # A graceful stop releases the Lease, so the next test's pod leads at once. Every pod
        # is removed, even when stopping one fails.
        failures = []
        for pod in self.started:
            try:
                if pod.running():
                    pod.stop()
            except Exception as err:  # reported once the rest are removed
                failures.append(err)
            pod.remove()
        if failures:
            raise failures[0]


@pytest.fixture
def pods(cluster: Cluster, template: PodTemplate, image: str, network: Network,
         tmp_path: Path) -> Iterator[Pods]:
    started = Pods(cluster, template, image, network, tmp_path)
    try:
        yield started
    finally:
        started.cleanup()


@pytest.fixture
def namespaces(cluster: Cluster) -> Iterator[Namespaces]:
    ns = Namespaces(cluster, f"pod-{secrets.token_hex(2)}")
    try:
        yield ns
    finally:
        ns.cleanup()


def service_account_user(template: PodTemplate, name: str | None = None) -> str:
    return f"system:serviceaccount:{template.namespace}:{name or template.service_account}"


def requests_from(cluster: Cluster, pod: Pod) -> list[dict[str, Any]]:
    """The apiserver's audit events of requests that came from `pod`'s address."""
    return [e for e in cluster.audit() if pod.ip in e.get("sourceIPs", [])]


def received(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"])


def leaders(*candidates: Pod) -> list[Pod]:
    return [p for p in candidates if p.metric("configmirror_leader") == 1]


def source_namespace_labels(template: PodTemplate) -> dict[str, str]:
    """Labels that let a namespace hold sources under the pod's --source-namespace-selector."""
    args = [str(a) for a in template.container.get("args", [])]
    flag = "--source-namespace-selector"
    selector = next((a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")), None)
    if selector is None and flag in args:
        selector = args[args.index(flag) + 1]
    labels = {}
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        key, equals, value = term.partition("=")
        if not equals or key.endswith("!") or not key.strip():
            pytest.fail(f"{flag} term {term!r}: only key=value terms are understood here")
        labels[key.strip()] = value.lstrip("=").strip()
    return labels


Replicate = Callable[..., tuple[str, str]]


@pytest.fixture
def replicate(cluster: Cluster, namespaces: Namespaces, template: PodTemplate) -> Replicate:
    """Makes a source (in a namespace allowed to hold one) aimed at a new namespace."""
    labels = source_namespace_labels(template)

    def make(name: str = "cfg") -> tuple[str, str]:
        source, target = namespaces(labels), namespaces()
        cluster.core.create_namespaced_config_map(
            source, configmap(name, {REPLICATE_TO: target}, data={"v": "1"}))
        return source, target

    return make


def test_the_image_runs_configmirror_from_its_venv_with_no_installer_compiler_or_tests(
        image: str) -> None:
    """What the image's Python (the one `configmirror` runs with) can import and run."""
    check = ("import importlib.util as u, json, shutil; print(json.dumps([sorted(m for m in "
             "('configmirror', 'configmirror_testing', 'tests', 'pytest', 'pip', 'setuptools') "
             "if u.find_spec(m)), sorted(c for c in ('gcc', 'cc', 'clang') if shutil.which(c))]))")
    done = docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c",
                  check)
    modules, compilers = json.loads(done.stdout)
    assert (modules, compilers) == (["configmirror"], [])


def test_pod_is_ready_under_the_manifests_security_context_and_limits(
        pods: Pods, template: PodTemplate) -> None:
    pod = pods()
    status = pod.status()  # the process itself, as the kernel sees it
    context = template.security_context
    assert status["Uid"].split() == [str(context["runAsUser"])] * 4
    assert status["Gid"].split() == [str(context["runAsGroup"])] * 4
    assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == 0, "capabilities: none"
    assert status["NoNewPrivs"] == "1"
    host = pod.inspect()["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["Memory"] == memory_bytes(template.container["resources"]["limits"]["memory"])


def test_in_cluster_config_replicates_as_the_service_account(
        pods: Pods, cluster: Cluster, replicate: Replicate, template: PodTemplate) -> None:
    pod = pods()
    _, target = replicate()
    wait_for(lambda: read(cluster, target, "cfg"), timeout=30, what="the replica")
    creates = [e for e in requests_from(cluster, pod)
               if e["verb"] == "create" and e["objectRef"].get("namespace") == target]
    assert creates, "the replica was written by someone other than the pod"
    assert {e["user"]["username"] for e in creates} == {service_account_user(template)}


def test_the_pod_verifies_the_apiserver_against_the_mounted_ca(
        pods: Pods, tmp_path: Path) -> None:
    """With a ca.crt that did not sign the apiserver's certificate, nothing is sent."""
    key, cert = tmp_path / "other-ca.key", tmp_path / "other-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=another-ca", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    pod = pods(ca=cert.read_bytes(), wait=False)
    wait_for(lambda: not pod.running(), timeout=60, what="the pod to give up")
    assert pod.inspect()["State"]["ExitCode"] != 0
    assert "CERTIFICATE_VERIFY_FAILED" in pod.logs()


def test_probes_and_metrics_answer_on_the_container_ports(
        pods: Pods, manifests: list[dict[str, Any]]) -> None:
    pod = pods()
    assert pod.probe("livenessProbe") == "ok"
    assert pod.probe("readinessProbe") == "ok"
    service = next(d for d in manifests if d["kind"] == "Service")
    for port in service["spec"]["ports"]:  # what Prometheus scrapes through the Service
        names = {sample for sample, _, _ in pod.scrape(port["targetPort"]).samples}
        assert {"workqueue_depth", "configmirror_leader"} <= names, port


def test_sigterm_exits_zero_well_within_the_grace_period(
        pods: Pods, template: PodTemplate) -> None:
    pod = pods()
    wait_for(lambda: leaders(pod), timeout=30, what="the pod to lead")  # a lease to release
    code, took = pod.stop()
    assert code == 0, pod.logs()[-3000:]
    assert took < template.grace_period / 4, f"{took:.1f} s to stop"


def test_two_pods_one_writes_and_stopping_it_hands_over_at_once(
        pods: Pods, cluster: Cluster, replicate: Replicate) -> None:
    first, second = pods(), pods()
    leader = wait_for(lambda: leaders(first, second), timeout=30, what="a leader")
    assert len(leader) == 1
    standby = second if leader[0] is first else first
    source, target = replicate()
    wait_for(lambda: read(cluster, target, "cfg"), timeout=30, what="the replica")
    # The server stores the replica a moment before the writer counts it: wait for the count.
    wait_for(lambda: leader[0].writes() == 1, timeout=10, what="the leader to count its write")
    assert standby.writes() == 0, "exactly one pod writes"

    code, _ = leader[0].stop()  # SIGTERM: the leader releases the lease on its way out
    assert code == 0
    # The standby tries every retry period (2 s, jittered up to 2.4 s); with the lease released
    # it need not wait out the lease duration (15 s).
    wait_for(lambda: leaders(standby), timeout=8, what="the standby to take over at once")
    cluster.core.patch_namespaced_config_map("cfg", source, {"data": {"v": "2"}})
    wait_for(lambda: (read(cluster, target, "cfg").data or {}) == {"v": "2"},  # type: ignore[union-attr]
             timeout=30, what="the new leader to update the replica")
    wait_for(lambda: standby.writes() == 1, timeout=10, what="the new leader's one write")


def test_the_process_writes_nothing_to_the_filesystem(
        pods: Pods, cluster: Cluster, replicate: Replicate) -> None:
    """Even with a writable root (every other pod here runs read-only), nothing is written."""
    pod = pods(writable_root=True)
    _, target = replicate()
    wait_for(lambda: read(cluster, target, "cfg"), timeout=30, what="the replica")
    code, _ = pod.stop()
    assert code == 0
    assert pod.written() == []


def test_a_rotated_token_is_read_again(
        pods: Pods, cluster: Cluster, replicate: Replicate, template: PodTemplate,
        manifests: list[dict[str, Any]]) -> None:
    rotated = f"configmirror-rotated-{secrets.token_hex(2)}"
    grant_same_rbac(cluster, manifests, template, rotated)
    pod = pods()
    wait_for(lambda: leaders(pod), timeout=30, what="the pod to lead")

    pod.volume.write_token(pods.token(rotated))
    old_user, new_user = service_account_user(template), service_account_user(template, rotated)

    def first_request_as_new_user() -> datetime | None:
        return min((received(e) for e in requests_from(cluster, pod)
                    if e["user"]["username"] == new_user), default=None)

    # The client reads the token file again once a minute; the lease renewals (every 2 s)
    # show when it did.
    switched = wait_for(first_request_as_new_user, timeout=90, interval=1,
                        what=f"requests as {new_user}")
    _, target = replicate("after-rotation")
    wait_for(lambda: read(cluster, target, "after-rotation"), timeout=30, what="the replica")
    # Enough traffic after the switch that a return to the old token would show.
    wait_for(lambda: any(received(e) > switched + timedelta(seconds=5)
                         for e in requests_from(cluster, pod)),
             timeout=30, interval=0.5, what="more requests from the pod")

    seen = requests_from(cluster, pod)
    creates = {e["user"]["username"] for e in seen
               if e["verb"] == "create" and e["objectRef"].get("namespace") == target}
    assert creates == {new_user}, "the replica was not written with the new token"
    # Requests built just before the switch may arrive just after it, never later.
    stale = [e for e in seen if e["user"]["username"] == old_user
             and received(e) > switched + timedelta(seconds=1)]
    assert not stale, f"{len(stale)} requests with the old token after the switch"


def grant_same_rbac(cluster: Cluster, manifests: list[dict[str, Any]],
                    template: PodTemplate, name: str) -> None:
    """ServiceAccount `name`, bound to every role deploy/ binds its ServiceAccount to."""
    subject = {"kind": "ServiceAccount", "name": template.service_account,
               "namespace": template.namespace}
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "ServiceAccount",
                                   "metadata": {"name": name, "namespace": template.namespace}}]
    for doc in manifests:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding") and subject in doc["subjects"]:
            metadata = {**doc["metadata"], "name": f"{doc['metadata']['name']}-{name}"}
            docs.append({**doc, "metadata": metadata,
                         "subjects": [{**subject, "name": name}]})
    assert len(docs) > 2, "deploy/ binds its ServiceAccount to no role"
    cluster.require_plane().kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


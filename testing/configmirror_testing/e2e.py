"""What the end-to-end tests share beyond the cluster (configmirror_testing.cluster): the
operators one test starts and stops (or the deployed one, in-cluster), small readers of what
the operator wrote, an identity with narrow RBAC, a kind cluster that pulls from a registry of
the test's own, and which of a suite's tests each operator flavour runs. The fixtures that hand
these out are the suite's (tests/).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from configmirror_testing.cluster import Cluster, require_kind, unique_name
from configmirror_testing.kind import KindCluster, owned_name
from configmirror_testing.nodeinstalls import Install
from configmirror_testing.objects import configmap
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import wait_for

__all__ = ["COSIGN_PASSWORD", "DEPLOYED_FLAVOURS", "IN_CLUSTER", "NODE_TIER", "RELEASE_PATH",
           "Flavour", "InClusterOperator", "Operator", "Operators", "PullingNode",
           "cluster_pulling_from", "configmap", "events", "operator_writes", "read",
           "requests_into", "restart_writes_nothing", "restricted_operator_identity",
           "runs_against", "wait_replica"]

Operator = OperatorProcess
IN_CLUSTER = os.environ.get("CONFIGMIRROR_E2E_OPERATOR") == "in-cluster"

# The flavours whose operator is a deployed one (not ours to start, stop or read the /metrics
# of: their tests marked `operator_process` are deselected), and whether the tests marked
# `grace` run against each. Those wait out a removal's delete grace, a minute each where the
# install ships its 60 s: make kind-test runs them against deploy/ (in-cluster), the node tier
# against the chart installed with a grace of 2 s (kind-chart), and not against the others.
DEPLOYED_FLAVOURS = {"in-cluster": True, "kind-deploy": False, "kind-chart": True,
                     "kind-release-oci": False, "kind-release-yaml": False}


def runs_against(flavour: str | None, item: pytest.Item) -> bool:
    """Whether a test (`item`) runs against operator flavour `flavour` (None: a test that
    takes none, against the suite's own processes, or with CONFIGMIRROR_E2E_OPERATOR's)."""
    if flavour is None and IN_CLUSTER:
        flavour = "in-cluster"
    if flavour not in DEPLOYED_FLAVOURS:
        return True
    if item.get_closest_marker("operator_process"):
        return False
    return DEPLOYED_FLAVOURS[flavour] or item.get_closest_marker("grace") is None


class InClusterOperator:
    """The operator `make kind-test` or `make cluster-test` deployed: running already, not
    ours to start or stop. Tests that need more are marked `operator_process` and deselected;
    one that is not marked skips here (and the cluster tests count that as a failure)."""

    @staticmethod
    def _local_only(what: str) -> Any:
        pytest.skip(f"needs a local operator process ({what}); the in-cluster one is used")

    def wait_ready(self, timeout: float = 30) -> None:
        pass

    def wait_idle(self, timeout: float = 60) -> None:
        self._local_only("its /metrics")

    def metric(self, name: str, **labels: str) -> float:
        return self._local_only("its /metrics")  # type: ignore[no-any-return]

    def writes(self) -> float:
        return self.metric("configmirror_replica_writes_total")

    def log(self) -> str:
        return self._local_only("its log")  # type: ignore[no-any-return]

    def stop(self, timeout: float = 30) -> int:
        return self._local_only("stopping it")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Flavour:
    """The operator a suite runs against: a local process on `cluster` as `identity` (the
    cluster's admin when None), or (`deployed`) the one installed in the cluster: in the node
    tier, `install` (configmirror_testing.nodeinstalls). `removal_timeout`: how long a removal
    may take; the suite's own operators remove at once (--delete-grace=0s, below), a deployed
    one waits out its grace first (deploy/'s is 60 s)."""

    name: str
    cluster: Cluster
    identity: Path | None = None
    deployed: bool = False
    install: Install | None = None
    removal_timeout: float = 10.0

    def operators(self, folder: Path) -> Operators:
        return Operators(self.cluster, folder, self.identity, in_cluster=self.deployed)


class Operators:
    """Starts operators for one test and stops them (checking a clean exit) afterwards."""

    def __init__(self, cluster: Cluster, folder: Path, identity: Path | None = None,
                 in_cluster: bool = IN_CLUSTER) -> None:
        self.cluster = cluster
        self.folder = folder
        # The kubeconfig an operator runs with unless a test gives one: the cluster's admin,
        # or another identity (a flavour: deploy/'s ServiceAccount token proves its RBAC).
        self.identity = identity or cluster.kubeconfig
        self.in_cluster = in_cluster
        self.started: list[OperatorProcess] = []
        self.in_cluster_used = False

    def __call__(self, *flags: str, kubeconfig: Path | None = None, wait: bool = True,
                 env: dict[str, str] | None = None) -> OperatorProcess:
        if self.in_cluster:
            if flags or kubeconfig or self.in_cluster_used:
                InClusterOperator._local_only("flags or restarts")
            self.in_cluster_used = True
            return InClusterOperator()  # type: ignore[return-value]
        if not any(f.startswith("--delete-grace") for f in flags):
            # The suite's operators remove at once, so a test of a removal waits for nothing;
            # the lifecycle tests give a grace of their own.
            flags = (*flags, "--delete-grace=0s")
        op = OperatorProcess(kubeconfig or self.identity,
                             self.folder / f"operator-{len(self.started)}.log", *flags, env=env)
        self.started.append(op)
        if wait:
            op.wait_ready()
        return op

    def stop_all(self) -> None:
        codes = [(op, op.stop()) for op in self.started]
        for op, code in codes:
            assert code == 0, f"operator exited with {code}:\n{op.log_tail()}"


def restart_writes_nothing(first: OperatorProcess, start: Callable[[], OperatorProcess]) -> None:
    """Stop `first` once idle, start another with `start`, and check that once it has looked
    at the replicas and gone idle it wrote nothing. At start-up it looks at a source's
    replicas through that source's plan (a source reconcile), which wakes only those that
    need work."""
    first.wait_idle()
    assert first.stop() == 0
    second = start()
    wait_for(lambda: second.metric("configmirror_reconciles_total", role="source") >= 1,
             what="the restarted operator to plan the source, and so look at its replicas")
    second.wait_idle()
    assert second.writes() == 0


def read(cluster: Cluster, namespace: str, name: str) -> client.V1ConfigMap | None:
    try:
        return cluster.core.read_namespaced_config_map(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def wait_replica(cluster: Cluster, namespace: str, data: dict[str, str] | None = None,
                 name: str = "cfg", timeout: float = 10) -> client.V1ConfigMap:
    def check() -> client.V1ConfigMap | None:
        cm = read(cluster, namespace, name)
        if cm is None or (data is not None and (cm.data or {}) != data):
            return None
        return cm
    found = wait_for(check, timeout=timeout, what=f"replica {namespace}/{name} with {data}")
    assert found is not None
    return found


def events(cluster: Cluster, namespace: str, name: str, reason: str | None = None
           ) -> list[client.CoreV1Event]:
    found = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in found if reason is None or e.reason == reason]


def operator_writes(cluster: Cluster, namespaces: list[str]) -> list[dict[str, Any]]:
    """The ConfigMap writes the operator made into `namespaces`, as the server audited them."""
    return [e for e in cluster.audit()
            if e.get("userAgent", "").startswith("configmirror/")
            and e.get("verb") in ("create", "update", "patch", "delete")
            and (e.get("objectRef") or {}).get("resource") == "configmaps"
            and (e.get("objectRef") or {}).get("namespace") in namespaces]


def restricted_operator_identity(cluster: Cluster, home: str, allowed: list[str],
                                  tmp: Path) -> tuple[Path, str]:
    """An identity that may read everything but write ConfigMaps only in `allowed`."""
    name = unique_name("restricted")
    rbac = cluster.rbac
    rule = client.V1PolicyRule
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=f"{name}-read"), rules=[
            rule(api_groups=[""], resources=["configmaps", "namespaces"],
                 verbs=["get", "list", "watch"]),
            rule(api_groups=[""], resources=["events"], verbs=["create", "patch"])]))
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=f"{name}-write"), rules=[
            rule(api_groups=[""], resources=["configmaps"],
                 verbs=["create", "update", "delete"])]))
    subject = [client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=home)]
    ref = client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                           name=f"{name}-read")
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=f"{name}-read"), role_ref=ref, subjects=subject))
    for ns in allowed:
        rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=f"{name}-write"), subjects=subject,
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io",
                                      kind="ClusterRole", name=f"{name}-write")))
    kubeconfig = cluster.service_account_kubeconfig(home, name, tmp / f"{name}.kubeconfig")
    return kubeconfig, f"system:serviceaccount:{home}:{name}"


def requests_into(cluster: Cluster, user: str, namespace: str) -> list[dict[str, Any]]:
    return [e for e in cluster.audit(user)
            if (e.get("objectRef") or {}).get("namespace") == namespace
            and (e.get("objectRef") or {}).get("resource") == "configmaps"]


NODE_TIER = "configmirror-node"  # the node tier's kind clusters: configmirror-node-<pid>-<hex>


RELEASE_PATH = "e2e"           # REGISTRY=127.0.0.1:<port>/e2e
COSIGN_PASSWORD = "e2e-password"


@contextlib.contextmanager
def cluster_pulling_from(registry: str, logs: Path) -> Iterator[Cluster]:
    """A kind cluster of its own whose nodes pull images named `registry/...` (127.0.0.1:PORT,
    as the release names them, plain HTTP) and hold no image of ours beforehand.

    The one thing the release's node tests ask of the node tier: 127.0.0.1 in a node is the
    node, so its containerd is told (a hosts.toml, KindCluster.use_registry) to reach that
    registry at the kind network's gateway, where Registry listens too."""
    tools = require_kind()
    kind = KindCluster(tools.kind, owned_name(NODE_TIER), tools.node_image, tools.kubectl,
                       logs.parent / f"{logs.name}-kind", logs_to=logs)
    kind.folder.mkdir(parents=True, exist_ok=True)
    kind.start()
    try:
        port = registry.rsplit(":", 1)[1]
        kind.use_registry(registry, f"http://{kind.host_address}:{port}")
        yield Cluster(kind.kubeconfig, None, kind)
    finally:
        kind.stop()
        print(f"kind cluster {kind.name} logs: {logs}")


@dataclass(frozen=True)
class PullingNode:
    """A kind cluster of cluster_pulling_from's, and what its node held as it came up, before
    anything was installed on it: its images, and each image reference's digest."""

    cluster: Cluster
    images: list[str]
    digests: dict[str, str]

    @classmethod
    def of(cls, cluster: Cluster) -> PullingNode:
        assert cluster.node is not None
        return cls(cluster, cluster.node.images(), cluster.node.image_digests())

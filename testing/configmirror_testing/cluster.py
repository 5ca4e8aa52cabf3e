"""What a test sees of Kubernetes: the Cluster (a kubeconfig, clients and, locally, the control
plane or the kind cluster), the namespaces one test owns, and the tools a cluster is made with,
found (or built) by configmirror_testing.tools' rule. The suite's fixtures (tests/conftest.py)
hand these out; tests import the types and helpers from here.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from configmirror_testing import tools
from configmirror_testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    kubernetes_version,
    oldest,
)
from configmirror_testing.kind import KindCluster, find_node_image
from configmirror_testing.objects import service_account_token, token_kubeconfig
from configmirror_testing.pod import docker_missing
from configmirror_testing.tools import REPO, missing, require, require_tool

__all__ = ["REPO", "SOURCE_LABEL", "Cluster", "KindTools", "Namespaces", "missing", "require",
           "require_docker", "require_kind", "start_plane", "unique_name"]


class Cluster:
    """What a test sees of Kubernetes: a kubeconfig, clients, and (locally) the control plane."""

    def __init__(self, kubeconfig: Path, plane: ControlPlane | None,
                 node: KindCluster | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.plane = plane
        self.node = node  # a kind cluster: its controller-manager really deletes namespaces
        self.api_client = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        self.core = client.CoreV1Api(self.api_client)
        self.rbac = client.RbacAuthorizationV1Api(self.api_client)

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """Create ServiceAccount `name` and write a kubeconfig holding only its token."""
        return token_kubeconfig(self.kubeconfig,
                                service_account_token(self.core, namespace, name), path)

    def token_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig holding only a token of the existing ServiceAccount `name`."""
        return token_kubeconfig(
            self.kubeconfig, service_account_token(self.core, namespace, name, create=False),
            path)

    def audit(self, user: str | None = None) -> list[dict[str, Any]]:
        """The apiserver's audit events (local control plane only)."""
        return self.require_plane().audit_events(user)

    def require_plane(self) -> ControlPlane:
        """The local control plane; skips the test against an external cluster."""
        if self.plane is None:
            pytest.skip("needs the local control plane (restart/compact), not an external one")
        return self.plane


def require_docker() -> None:
    """Skip the test without a Docker daemon; in CI, fail it."""
    reason = docker_missing()
    require(None if reason is None else (
        f"no Docker: {reason}. Install docker.io and start dockerd as root (.ci/run does both)"))


@dataclass(frozen=True)
class KindTools:
    """What a kind cluster of the node tier is made with."""

    kind: Path
    node_image: str
    kubectl: Path


def require_kind() -> KindTools:
    """kind, the node image (KIND_NODE_IMAGE, else ours) and kubectl; skips the test when one
    is missing (in CI, or under make, builds what it can; in CI fails the test for the rest)."""
    require_docker()
    kind = require_tool("kind") / "kind"
    image = find_node_image(REPO, build=tools.building())
    if image is None:
        missing("no kind node image: run `make kind-node-image`, or set KIND_NODE_IMAGE "
                "(e.g. kind's own kindest/node, where a registry is reachable)")
    return KindTools(kind, image, require_tool("controlplane") / "kubectl")


def start_plane(**options: Any) -> ControlPlane:
    """A started local control plane (ControlPlane's options); the caller stops it."""
    if oldest():  # its folder has no kubectl or etcdctl: the current one's serve
        options.setdefault("clients", require_tool("controlplane"))
        plane = ControlPlane(require_tool("controlplane-oldest"), **options)
    else:
        plane = ControlPlane(require_tool("controlplane"), **options)
    plane.start()
    # The oldest run selects its tests by the version it names: it must be the one served.
    served = str(plane.api("GET", "/version").get("gitVersion", ""))
    if oldest() and served != f"v{kubernetes_version()}":
        plane.stop()
        raise ControlPlaneError(f"the control plane in {plane.assets} serves Kubernetes "
                                f"{served}, not v{kubernetes_version()} (versions.env)")
    return plane


CLEANUP_THREADS = 8  # namespaces deleted and finalized at once after a test
SOURCE_LABEL = {"configmirror.io/source": "true"}  # deploy/'s --source-namespace-selector


def unique_name(prefix: str) -> str:
    """`prefix` and 8 random hex digits: a test that makes 300 namespaces drew two of the same
    name about once in 370 runs with 6; with 8, once in 95,000."""
    return f"{prefix}-{secrets.token_hex(4)}"


class Namespaces:
    """Creates namespaces for one test and removes them afterwards (finalizing them on the
    bare control plane, where no namespace controller runs). Each gets `source_labels` too
    unless it is given other values for them: a deployed operator honours sources only in
    namespaces labelled so (deploy/'s --source-namespace-selector: SOURCE_LABEL); the tests'
    own operators have no selector. None: SOURCE_LABEL with CONFIGMIRROR_E2E_OPERATOR=in-cluster,
    else none."""

    def __init__(self, cluster: Cluster, prefix: str,
                 source_labels: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.prefix = prefix
        if source_labels is None:
            in_cluster = os.environ.get("CONFIGMIRROR_E2E_OPERATOR") == "in-cluster"
            source_labels = SOURCE_LABEL if in_cluster else {}
        self.source_labels = dict(source_labels)
        self.created: list[str] = []

    def __call__(self, labels: dict[str, str] | None = None, name: str | None = None) -> str:
        name = name or unique_name(self.prefix)
        labels = {**self.source_labels, **(labels or {})}
        self.cluster.core.create_namespace(client.V1Namespace(
            metadata=client.V1ObjectMeta(name=name, labels=labels)))
        self.created.append(name)
        return name

    def many(self, count: int, labels: dict[str, str] | None = None,
             names: Sequence[str] | None = None) -> list[str]:
        """`count` namespaces with the same labels (named `names` if given), created several
        at once, in the order asked: 1,000 one after another took half a minute."""
        chosen = list(names) if names is not None else [unique_name(self.prefix)
                                                         for _ in range(count)]
        assert len(chosen) == count, f"{len(chosen)} names for {count} namespaces"
        with ThreadPoolExecutor(max_workers=CLEANUP_THREADS) as pool:
            return list(pool.map(lambda name: self(labels, name), chosen))

    def delete(self, name: str, finalize: bool = True) -> None:
        """Delete a namespace; with `finalize`, on the bare control plane, also do the
        namespace controller's job."""
        try:
            self.cluster.core.delete_namespace(name)
        except client.ApiException as err:
            if err.status != 404:
                raise
        if finalize and self.cluster.plane is not None and self.cluster.node is None:
            self.cluster.plane.finalize_namespace(name)

    def cleanup(self) -> None:
        """Delete (and finalize) every namespace created, several at once: a fan-out test's
        300 took half a minute one after another. The first error is raised after all."""
        with ThreadPoolExecutor(max_workers=CLEANUP_THREADS) as pool:
            for done in [pool.submit(self.delete, name) for name in self.created]:
                done.result()

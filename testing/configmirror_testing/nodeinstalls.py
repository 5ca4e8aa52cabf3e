"""The installs the node tier deploys on a kind node, each an operator flavour (tests/fixtures.py
`flavour`): deploy/ with the image under test, the chart, and the release's chart from oci://
and its install.yaml. Each one is installed on entering and removed on leaving, so the next can
take its place on the same cluster (they share names: `configmirror` in `configmirror`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType

from kubernetes import client

from configmirror_testing.cluster import REPO, Cluster
from configmirror_testing.deployed import DeployedOperator
from configmirror_testing.helm import Helm, cluster_scoped_objects
from configmirror_testing.kind import KindCluster
from configmirror_testing.release import Release
from configmirror_testing.wait import wait_for

__all__ = ["CHART", "NAMESPACE", "RELEASE", "ChartRelease", "DeployOverlay", "Install",
           "InstallYaml", "OciChart", "create_install_namespace", "wait_namespace_gone"]

CHART = REPO / "charts" / "configmirror"
RELEASE = NAMESPACE = "configmirror"  # as the README installs it


def create_install_namespace(cluster: Cluster) -> None:
    """The namespace the README makes before `helm install`: never a target, and on the
    `restricted` Pod Security level, like deploy/'s own."""
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=NAMESPACE, labels={"configmirror.io/ignore": "true",
                                "pod-security.kubernetes.io/enforce": "restricted"})))


def wait_namespace_gone(cluster: Cluster, timeout: float = 180) -> None:
    def gone() -> bool:
        try:
            cluster.core.read_namespace(NAMESPACE)
        except client.ApiException as err:
            return bool(err.status == 404)
        return False
    wait_for(gone, timeout, f"namespace {NAMESPACE} to be deleted")


class Install:
    """An install of configmirror on `cluster` (a kind cluster's): `with install:` installs it
    and waits for its rollout, and removes it again on leaving."""

    def __init__(self, cluster: Cluster, name: str = RELEASE) -> None:
        assert cluster.node is not None, "the node tier's installs need a kind cluster"
        self.cluster = cluster
        self.admin: KindCluster = cluster.node  # kubectl as admin
        self.operator = DeployedOperator(cluster.api_client, NAMESPACE, name)
        self.installed = False

    def install(self) -> None:
        raise NotImplementedError

    def uninstall(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Install:
        self.installed = True  # whatever part of it gets made is removed again
        try:
            self.install()
            self.operator.wait_rollout(timeout=600)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.installed:
            self.uninstall()
            self.installed = False


class DeployOverlay(Install):
    """deploy/ applied unchanged but for the image: a kustomization of it in `folder` that sets
    the image, as `kustomize edit set image` would; deleted (and waited for) on leaving, its
    namespace emptied by the namespace controller."""

    def __init__(self, cluster: Cluster, image: str, folder: Path) -> None:
        super().__init__(cluster)
        self.overlay = folder
        name, _, tag = image.rpartition(":")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "kustomization.yaml").write_text(json.dumps({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(REPO / "deploy", folder)],
            "images": [{"name": "configmirror", "newName": name, "newTag": tag}]}))

    def install(self) -> None:
        self.admin.kubectl("apply", "-k", str(self.overlay))

    def uninstall(self) -> None:
        self.admin.kubectl("delete", "-k", str(self.overlay), "--wait=true", "--timeout=180s",
                           "--ignore-not-found")


class ChartRelease(Install):
    """charts/configmirror from this tree as release `configmirror`, with the image under test,
    into the namespace the README makes first; `before` is what the cluster held cluster-wide
    before it. Removed on leaving if a test did not uninstall it, and its namespace with it."""

    def __init__(self, cluster: Cluster, helm: Helm, image: str) -> None:
        super().__init__(cluster)
        self.helm = helm
        repository, _, tag = image.rpartition(":")
        self.image_values = ["--set", f"image.repository={repository}",
                             "--set-string", f"image.tag={tag}",
                             "--set", "image.pullPolicy=IfNotPresent",
                             # A grace of 2 s, not the 60 s the chart ships (kind-test runs the
                             # suite on that, with deploy/): the replication suite here also
                             # runs its removals, and the value reaches the pods' args.
                             "--set", "deleteGrace=2s"]
        self.before: set[str] = set()

    def install(self) -> None:
        create_install_namespace(self.cluster)
        self.before = cluster_scoped_objects(self.admin)
        self.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, *self.image_values,
                  "--wait", "--timeout=5m", kubeconfig=self.cluster.kubeconfig, timeout=330)

    def upgrade(self, *values: str) -> None:
        self.helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
                  *values, "--wait", "--timeout=5m", kubeconfig=self.cluster.kubeconfig,
                  timeout=330)

    def uninstall(self) -> None:
        self.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout=5m",
                  kubeconfig=self.cluster.kubeconfig, timeout=330)
        self.installed = False

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            super().__exit__(kind, error, trace)
        finally:
            self.cluster.core.delete_namespace(NAMESPACE)
            wait_namespace_gone(self.cluster)


class OciChart(Install):
    """The release's chart, `helm install configmirror oci://...` as the README gives it (the
    image pulled from the release's registry), into the namespace the README makes first."""

    def __init__(self, cluster: Cluster, helm: Helm, release: Release) -> None:
        super().__init__(cluster)
        self.helm = helm
        self.release = release

    def install(self) -> None:
        create_install_namespace(self.cluster)
        self.helm("install", RELEASE, self.release.chart, "--version", self.release.version,
                  "--plain-http", "--namespace", NAMESPACE, "--wait", "--timeout=10m",
                  kubeconfig=self.cluster.kubeconfig, timeout=630)

    def uninstall(self) -> None:
        self.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout=5m",
                  kubeconfig=self.cluster.kubeconfig, timeout=330, check=False)
        self.cluster.core.delete_namespace(NAMESPACE)
        wait_namespace_gone(self.cluster)


class InstallYaml(Install):
    """The release's dist/install.yaml, `kubectl apply -f` as the README gives it (the image
    pulled from the release's registry by digest)."""

    def __init__(self, cluster: Cluster, release: Release) -> None:
        super().__init__(cluster)
        self.manifest: Path = release.install_yaml

    def install(self) -> None:
        self.admin.kubectl("apply", "-f", str(self.manifest))

    def uninstall(self) -> None:
        self.admin.kubectl("delete", "-f", str(self.manifest), "--wait=true", "--timeout=180s",
                           "--ignore-not-found", check=False)

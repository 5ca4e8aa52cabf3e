"""The fixtures every tier but unit shares: operators started (and stopped) for one test, the
operator flavours a suite runs against, deploy/ applied, the image built from this tree, helm,
the kind cluster of the node tier, cosign, a registry and a release. The helpers they hand out
are configmirror_testing.e2e's.

The operator process itself is `configmirror_testing.operator.OperatorProcess`, the one
launcher the tests, the benchmarks and `make demo` share. Operators run with default flags
unless a test passes its own.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from configmirror import __version__
from configmirror_testing.cluster import (
    REPO,
    Cluster,
    Namespaces,
    require,
    require_docker,
    require_kind,
)
from configmirror_testing.e2e import *  # noqa: F403  (the helpers, for modules not moved yet)
from configmirror_testing.e2e import (
    COSIGN_PASSWORD,
    IN_CLUSTER,
    NODE_TIER,
    RELEASE_PATH,
    Flavour,
    Operators,
    PullingNode,
    cluster_pulling_from,
)
from configmirror_testing.fleet import Members, start_members
from configmirror_testing.helm import Helm
from configmirror_testing.kind import KindCluster, owned_name, remove_orphans
from configmirror_testing.nodeinstalls import (
    ChartRelease,
    DeployOverlay,
    Install,
    InstallYaml,
    OciChart,
)
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.pod import build_image, remove_image
from configmirror_testing.registry import Registry, registry_missing
from configmirror_testing.release import Release, generate_key_pair, publish, release_missing
from configmirror_testing.tools import require_tool

# The operators of a suite that takes `flavour` (test_replication.py): once per flavour. The
# node tier's (marked `node`: make cluster-test, not make test) are installs on a kind node:
# their first test sets up the cluster and the install (the release's: `make release` too),
# hence the longer timeouts.
_NODE = [pytest.mark.node, pytest.mark.timeout(1800)]
_RELEASE_NODE = [pytest.mark.node, pytest.mark.release, pytest.mark.timeout(3600)]
FLAVOURS = ["in-cluster"] if IN_CLUSTER else [
    "process", "deploy-rbac",
    pytest.param("kind-deploy", marks=_NODE), pytest.param("kind-chart", marks=_NODE),
    pytest.param("kind-release-oci", marks=_RELEASE_NODE),
    pytest.param("kind-release-yaml", marks=_RELEASE_NODE)]
DEPLOYED_REMOVAL_TIMEOUT = 100.0  # deploy/'s grace (60 s) and the removal after it


@pytest.fixture
def operators(cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
              ) -> Iterator[Operators]:
    """The operators of one test: of its flavour when it takes one, else local processes."""
    if "flavour" in request.fixturenames:
        ops = request.getfixturevalue("flavour").operators(tmp_path)
    else:
        ops = Operators(cluster, tmp_path)
    try:
        yield ops
    finally:
        ops.stop_all()


@pytest.fixture
def operator(operators: Operators) -> OperatorProcess:
    """A running operator with default flags."""
    return operators()


# -- shared by several modules ------------------------------------------------------------------

@pytest.fixture(scope="session")
def deploy_applied(session_cluster: Cluster) -> Cluster:
    """deploy/ applied for real on the local control plane (no kubelet here, so its pods never
    run; its RBAC is real)."""
    session_cluster.require_plane().kubectl("apply", "-k", str(REPO / "deploy"))
    return session_cluster


@pytest.fixture(scope="session")
def deploy_sa_kubeconfig(deploy_applied: Cluster,
                         tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig holding only a TokenRequest token of deploy/'s ServiceAccount."""
    return deploy_applied.token_kubeconfig("configmirror", "configmirror",
                                           tmp_path_factory.mktemp("sa") / "kubeconfig")


@pytest.fixture(scope="session", params=FLAVOURS)
def flavour(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flavour]:
    """The operator a suite that takes this fixture runs against, once per flavour (each test
    reported by name with the flavour's id): a local process as the cluster's admin, one with
    only deploy/'s ServiceAccount token (its RBAC is enough), against a deployed operator
    (CONFIGMIRROR_E2E_OPERATOR=in-cluster: make kind-test) that one, and in the node tier an
    install on a kind node (configmirror_testing.nodeinstalls): deploy/, the chart, and the
    release's chart from oci:// and its install.yaml on a node that pulls from the registry.

    Session-scoped, so that pytest runs every test of one flavour (the node tier's modules
    take theirs too, by `parametrize("flavour", [...], indirect=True)`) before it removes that
    install and sets up the next: the installs share a cluster and their names."""
    name = str(request.param)
    if name == "process":
        yield Flavour(name, request.getfixturevalue("session_cluster"))
        return
    if name == "deploy-rbac":
        yield Flavour(name, request.getfixturevalue("session_cluster"),
                      identity=request.getfixturevalue("deploy_sa_kubeconfig"))
        return
    if name == "in-cluster":
        yield Flavour(name, request.getfixturevalue("session_cluster"), deployed=True,
                      removal_timeout=DEPLOYED_REMOVAL_TIMEOUT)
        return
    install: Install
    if name == "kind-deploy":
        install = DeployOverlay(request.getfixturevalue("node_cluster"),
                                request.getfixturevalue("image"),
                                tmp_path_factory.mktemp("overlay"))
    elif name == "kind-chart":
        install = ChartRelease(request.getfixturevalue("node_cluster"),
                               request.getfixturevalue("helm"), request.getfixturevalue("image"))
    elif name == "kind-release-oci":
        install = OciChart(request.getfixturevalue("release_node").cluster,
                           request.getfixturevalue("helm"), request.getfixturevalue("release"))
    elif name == "kind-release-yaml":
        install = InstallYaml(request.getfixturevalue("release_node").cluster,
                              request.getfixturevalue("release"))
    else:
        raise ValueError(f"no operator flavour {name!r}")
    with install:
        yield Flavour(name, install.cluster, deployed=True, install=install,
                      removal_timeout=DEPLOYED_REMOVAL_TIMEOUT)


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image as `make image` builds it from this tree (or CONFIGMIRROR_E2E_IMAGE's)."""
    require_docker()
    given = os.environ.get("CONFIGMIRROR_E2E_IMAGE")
    if given:
        yield given
        return
    tag = f"configmirror-e2e:{secrets.token_hex(4)}"
    build_image(REPO, tag, tmp_path_factory.mktemp("image") / "build.log")
    try:
        yield tag
    finally:
        remove_image(tag)


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm as `make helm` builds it, with its homes in a temp folder."""
    return Helm(require_tool("helm") / "helm", tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def node_cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A kind cluster (configmirror_testing.kind) of the node image, holding the image under
    test, shared by the node tier's modules; its nodes' logs are kept in the session's temp
    folder. Clusters a killed run left behind go first."""
    tools = require_kind()
    folder = tmp_path_factory.mktemp("kind")
    kind = KindCluster(tools.kind, owned_name(NODE_TIER), tools.node_image, tools.kubectl,
                       folder, logs_to=folder / "logs")
    for orphan in remove_orphans(tools.kind, NODE_TIER, kind.env):
        print(f"removed kind cluster {orphan}: its owner process is gone")
    kind.start()
    try:
        kind.load_docker_image(image)
        yield Cluster(kind.kubeconfig, None, kind)
    finally:
        kind.stop()
        print(f"kind cluster {kind.name} ({tools.node_image}, {kind.provider}) logs: "
              f"{folder / 'logs'}")


@pytest.fixture(scope="session")
def release_node(release: Release, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[PullingNode]:
    """A kind cluster of its own whose node pulls the release's image from the registry
    (configmirror_testing.e2e.cluster_pulling_from), and what it held before any install."""
    with cluster_pulling_from(release.registry.address,
                              tmp_path_factory.mktemp("node-logs")) as pulling:
        yield PullingNode.of(pulling)


# -- the release (make release) and a registry to publish it to ----------------------------------

@pytest.fixture(scope="session")
def cosign() -> Path:
    """cosign as `make cosign` builds it (built here in CI)."""
    return require_tool("cosign") / "cosign"


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Debian's docker-registry on 127.0.0.1, plain HTTP, for the session."""
    require(registry_missing())
    with Registry(tmp_path_factory.mktemp("registry")) as started:
        yield started


@pytest.fixture(scope="session")
def release(registry: Registry, cosign: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Release:
    """`make release REGISTRY=<registry>/e2e VERSION=<configmirror's>`, signed with a key pair
    made for the session; dist/ in a temp folder."""
    require(release_missing())
    folder = tmp_path_factory.mktemp("release")
    key, _ = generate_key_pair(cosign, folder / "keys", COSIGN_PASSWORD)
    log = folder / "make-release.log"
    try:
        return publish(registry, RELEASE_PATH, __version__, folder / "dist", log,
                       key=key, password=COSIGN_PASSWORD)
    finally:
        print(f"make release log: {log}")


# -- member clusters (configmirror_testing.fleet) -------------------------------------------------

@pytest.fixture(scope="session")
def members(session_cluster: Cluster) -> Iterator[Members]:
    """Two member clusters of the home one (`session_cluster`), "b" and "c": each a control
    plane of its own (etcd + kube-apiserver, started in parallel on the first test that asks)
    behind its own FaultProxy, with its admin `cluster`, the `proxied_kubeconfig` an operator
    is given, `cluster_secret()`, `token_kubeconfig()`, faults (`proxy`, `partition()`,
    `heal()`, `stop_apiserver()`, `start_apiserver()`, `down(seconds)`). What a test leaves
    broken is repaired after it (`_members_restored`). Stopped at the session's end."""
    if IN_CLUSTER:
        pytest.skip("member clusters listen on this machine's loopback, which a deployed "
                    "operator does not reach")
    fleet = start_members(session_cluster)
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture(autouse=True)
def _members_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used `members`: each member's apiserver started if it is down, its
    proxy healed and its connections closed, so the next test finds the fleet whole."""
    if "members" not in request.fixturenames:
        yield
        return
    fleet: Members = request.getfixturevalue("members")
    yield
    for name, fixed in fleet.restore().items():
        print(f"member {name} after {request.node.name}: {'; '.join(fixed)}")


@pytest.fixture
def member_namespaces(members: Members, request: pytest.FixtureRequest
                      ) -> Iterator[dict[str, Namespaces]]:
    """A namespace factory per member (by name), named after the test, emptied after it."""
    prefix = "t-" + request.node.name.replace("_", "-").replace("[", "-")[:30].strip("-").lower()
    made = {m.name: m.namespaces("".join(c for c in prefix if c.isalnum() or c == "-"))
            for m in members}
    try:
        yield made
    finally:
        members.restore()  # a member left down by the test cannot delete them
        for factory in made.values():
            factory.cleanup()

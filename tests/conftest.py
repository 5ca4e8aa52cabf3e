"""The test suite's Kubernetes: one real control plane per session, a fresh namespace per test.

Tests that need Kubernetes take the `cluster` fixture (or `namespace`/`kube`). By default that
is a local etcd + kube-apiserver (configmirror_testing.controlplane). With
CONFIGMIRROR_E2E_KUBECONFIG set, the same tests run against that cluster instead (that is how
`make kind-test` works); tests that need to restart or compact the control plane itself skip
there. With CONFIGMIRROR_E2E_OPERATOR=in-cluster the operator is the deployed one, and tests
that need it as a local process (marked `operator_process`) are deselected. `make cluster-test`
runs the tests marked `node` in a kind cluster (configmirror_testing.kind), where real nodes run
the pods and a kube-controller-manager deletes namespaces for real. The control plane, the kind
helper, the waiter and the object builders live in `configmirror_testing` (testing/), shared
with the benchmarks and `make demo`.

Every tool (the control plane, helm, promtool, kind, ...) is found, or built, by one rule
(configmirror_testing.tools): in CI (CI=true) a missing one fails the tests that need it; on a
laptop without Go they skip, with one line saying how to get it. Docker, which the image's
tests need, and kind (Docker, kind, a node image) are treated the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from configmirror_testing import tools
from configmirror_testing.cluster import (
    REPO,
    SOURCE_LABEL,
    Cluster,
    Namespaces,
    missing,
    require,
    require_docker,
    require_kind,
    start_plane,
    unique_name,
)
from configmirror_testing.controlplane import KUBERNETES, kubernetes_version, minor_of
from configmirror_testing.e2e import IN_CLUSTER, runs_against
from configmirror_testing.operator import OperatorProcess

# The fixtures every tier but unit shares (operators, flavours, the image, helm, kind, a
# registry, the release): tests/fixtures.py.
pytest_plugins = ["tests.fixtures"]

# Property tests assert properties, not speed: no per-example deadline, which a loaded CI
# machine (or the first call that compiles a regex) exceeds without anything being wrong.
settings.register_profile("configmirror", deadline=None)
settings.load_profile("configmirror")

__all__ = ["REPO", "Cluster", "Namespaces", "missing", "require", "require_docker",
           "require_kind", "start_plane", "unique_name"]


def pytest_configure(config: pytest.Config) -> None:
    """A tool built for the suite (configmirror_testing.tools) shows its build's output."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        tools.uncaptured = capture.global_and_fixture_disabled


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests an operator flavour does not run (configmirror_testing.e2e
    runs_against): against a deployed operator, the tests that need one as a local process,
    and against some, the tests that wait out its grace. On the local control plane, also
    those marked `kubernetes(since=..., reason=...)` that its version is older than: they
    are listed with the reason at the end, never skipped."""
    dropped = [item for item in items if not runs_against(flavour_of(item), item)]
    older = [] if os.environ.get("CONFIGMIRROR_E2E_KUBECONFIG") else [
        (item, mark) for item in items if item not in dropped
        and (mark := item.get_closest_marker("kubernetes")) is not None
        and minor_of(kubernetes_version()) < minor_of(mark.kwargs["since"])]
    VERSION_DESELECTED[:] = [
        f"{item.nodeid}: needs Kubernetes {mark.kwargs['since']}+: {mark.kwargs['reason']}"
        for item, mark in older]
    dropped += [item for item, _ in older]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


VERSION_DESELECTED: list[str] = []  # what the Kubernetes under test is too old for, and why


def pytest_report_header() -> str:
    """Which Kubernetes the local control plane runs (CONFIGMIRROR_KUBERNETES)."""
    if os.environ.get("CONFIGMIRROR_E2E_KUBECONFIG"):
        return "kubernetes: the cluster of CONFIGMIRROR_E2E_KUBECONFIG"
    return f"kubernetes: {kubernetes_version()} (local control plane; {KUBERNETES}=oldest|current)"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if VERSION_DESELECTED:
        terminalreporter.section(f"deselected for Kubernetes {kubernetes_version()}")
        for line in VERSION_DESELECTED:
            terminalreporter.line(line)


# The operators a test could have seen: those running when it started and those it launched.
SEEN = pytest.StashKey[tuple[int, list[OperatorProcess]]]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[SEEN] = (len(OperatorProcess.launched),
                        [op for op in OperatorProcess.launched if op.proc.poll() is None])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the logs of the operator processes it saw (their last
    60 lines each): a timeout in a wait says what the operator was doing, in the CI log."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or SEEN not in item.stash:
        return
    first, running = item.stash[SEEN]
    for op in dict.fromkeys([*running, *OperatorProcess.launched[first:]]):
        report.sections.append((f"operator log {op.log_path} (its end)", op.log_tail()))


def flavour_of(item: pytest.Item) -> str | None:
    """The operator flavour a test runs against (tests/fixtures.py `flavour`), if it takes one."""
    callspec = getattr(item, "callspec", None)
    flavour = callspec.params.get("flavour") if callspec is not None else None
    return None if flavour is None else str(flavour)


@pytest.fixture(scope="session")
def session_cluster() -> Iterator[Cluster]:
    """The session's cluster: the local control plane, or CONFIGMIRROR_E2E_KUBECONFIG's."""
    external = os.environ.get("CONFIGMIRROR_E2E_KUBECONFIG")
    if external:
        yield Cluster(Path(external), None)
        return
    plane = start_plane()
    try:
        yield Cluster(plane.kubeconfig, plane)
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def cluster(session_cluster: Cluster) -> Cluster:
    """The cluster a test runs on: the session's, unless its module says otherwise (the
    node tier's kind clusters; test_replication.py, its flavour's)."""
    return session_cluster


@pytest.fixture(scope="session")
def uncached_cluster() -> Iterator[Cluster]:
    """A second local control plane with --watch-cache=false, where compact() forces 410."""
    if os.environ.get("CONFIGMIRROR_E2E_KUBECONFIG"):
        pytest.skip("needs the local control plane (etcd compaction), not an external one")
    plane = start_plane(watch_cache=False)
    try:
        yield Cluster(plane.kubeconfig, plane)
    finally:
        plane.stop()


@pytest.fixture
def namespaces(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Namespaces]:
    """A factory of namespaces owned by this test (named after it, removed after it)."""
    prefix = "t-" + request.node.name.replace("_", "-").replace("[", "-")[:30].strip("-").lower()
    # A deployed operator honours sources only in namespaces labelled so (deploy/'s
    # --source-namespace-selector; the chart's and the release's are the same).
    deployed = IN_CLUSTER or ("flavour" in request.fixturenames
                              and request.getfixturevalue("flavour").deployed)
    ns = Namespaces(cluster, "".join(c for c in prefix if c.isalnum() or c == "-"),
                    source_labels=SOURCE_LABEL if deployed else {})
    try:
        yield ns
    finally:
        ns.cleanup()


@pytest.fixture
def namespace(namespaces: Namespaces) -> str:
    """One fresh namespace for this test."""
    return namespaces()

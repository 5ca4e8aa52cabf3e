"""The README's "Five minutes on kind", run as written on a kind cluster of its own.

The commands are read from README.md itself, so a README change that breaks the quickstart
fails here. They run in order, from the repository's root, with kubectl and
`kubectl configmirror` pointed at the cluster by KUBECONFIG. Only what this machine forces is
substituted, each where it happens below:

- `kind create cluster --name configmirror`: KindCluster.start() with the pinned kind, the
  suite's node image (no registry here: kind's own image cannot be pulled) and
  hack/kind/cluster.yaml, under a name of this process's own (owned_name), so that a user's
  cluster named `configmirror` is never touched and a killed run's cluster can be removed.
- `make image`: the session's `image` fixture, which is hack/image.sh, what `make image` runs
  (its offline base where python:3.11-slim cannot be pulled); under `make cluster-test` it is
  configmirror:0.1.0 itself. Loaded as the README does; if its tag is another, the node's
  containerd also names it by the README's tag, since deploy/ runs that one.
- `make dist && pip install dist/configmirror-*.whl`: the suite runs from its venv, which has
  configmirror installed already; its bin folder goes first on PATH, and the suite's kubectl
  (the control plane's, version-matched to the node image) stands for `kubectl`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from configmirror_testing.cluster import REPO, require_kind
from configmirror_testing.kind import KindCluster, owned_name, remove_orphans
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.node, pytest.mark.timeout(1800)]
PREFIX = "configmirror-quickstart"
TARGETS = ["billing", "team-a", "team-b"]  # what the README says receives shared-ca


def quickstart() -> list[list[str]]:
    """The commands of the README's kind block, without comments, one argv each."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Five minutes on kind", 1)[1].split("```", 2)[1]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line]


@pytest.fixture(scope="module")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    """Not started: the test starts it where the README creates its cluster; stopped after."""
    tools = require_kind()
    folder = tmp_path_factory.mktemp("quickstart")
    cluster = KindCluster(tools.kind, owned_name(PREFIX), tools.node_image, tools.kubectl,
                          folder, logs_to=folder / "logs")
    for orphan in remove_orphans(tools.kind, PREFIX, cluster.env):
        print(f"removed kind cluster {orphan}: its owner process is gone")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_the_readme_kind_quickstart_replicates_the_example_and_status_says_in_sync(
        kind_cluster: KindCluster, image: str) -> None:
    commands = quickstart()
    assert [c[:2] for c in commands] == [
        ["kind", "create"], ["make", "image"], ["kind", "load"], ["kubectl", "apply"],
        ["kubectl", "-n"], ["kubectl", "apply"], ["kubectl", "label"], ["kubectl", "apply"],
        ["kubectl", "get"], ["make", "dist"], ["kubectl", "configmirror"]], commands
    create, _make_image, load, *applies, listing, _install, status = commands
    readme_name = create[create.index("--name") + 1]
    env = {**os.environ, **kind_cluster.env, "KUBECONFIG": str(kind_cluster.kubeconfig),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                    str(kind_cluster.kubectl_binary.parent),
                                    os.environ.get("PATH", "")])}

    def run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        if argv[0] == "kubectl":
            argv = [str(kind_cluster.kubectl_binary), *argv[1:]]
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        return done

    kind_cluster.start()  # for `kind create cluster --name configmirror` (see the docstring)
    # `kind load docker-image configmirror:0.1.0 --name configmirror`: the image under test.
    readme_tag = load[load.index("docker-image") + 1]
    assert load[load.index("--name") + 1] == readme_name, load
    kind_cluster.load_docker_image(image)
    if image != readme_tag:
        for node in kind_cluster.nodes():
            kind_cluster.engine("exec", node, "ctr", "--namespace=k8s.io", "images", "tag",
                                "--force", _qualified(image), _qualified(readme_tag))
    # deploy/, its rollout (the README's command, which waits), the example, the label.
    for argv in applies:
        run(argv, timeout=900)

    def replicas() -> list[tuple[str, ...]]:
        out = run([*listing, "--no-headers", "-o",
                   "custom-columns=NS:.metadata.namespace,NAME:.metadata.name"]).stdout
        return sorted(tuple(line.split()) for line in out.splitlines())

    expected = [(namespace, "shared-ca") for namespace in TARGETS]
    wait_for(lambda: replicas() == expected, 120, "the README's three replicas")

    # The status line as written: the commands judge with the deployed operator's published
    # policy (its source-namespace selector included), so no flag repeats it.
    done = run(status, timeout=120)
    assert "configmap platform/shared-ca: 3/3 target(s) in sync" in done.stdout, done.stdout
    assert "1 source(s): 0 pending, 0 problem(s)" in done.stdout, done.stdout
    assert "following the operator in namespace configmirror" in done.stderr, done.stderr
    assert "overrides" not in done.stderr, done.stderr
    for namespace in TARGETS:
        held = run([*status, "--target-namespace", namespace], timeout=120).stdout
        assert "holds  configmap shared-ca  replica of platform/shared-ca (in sync)" in held, \
            (namespace, held)


def _qualified(tag: str) -> str:
    """A short image name as containerd stores it (docker.io/library/NAME:TAG)."""
    first = tag.split("/", 1)[0]
    if "/" in tag and ("." in first or ":" in first or first == "localhost"):
        return tag
    return f"docker.io/{tag}" if "/" in tag else f"docker.io/library/{tag}"

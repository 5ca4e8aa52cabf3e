"""The node cluster itself (configmirror_testing.node): one per machine, root only, and nothing
left behind even when its owner is killed with a pod running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from configmirror_testing.node import HOST, LOCK, MachineLock, NodeCluster, NodeError
from configmirror_testing.nodehost import SHARED_SYSCTLS, SYSCTLS, bridges, read_sysctl
from configmirror_testing.wait import wait_for
from tests.conftest import REPO, require_node

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

# A child that starts a node cluster, runs a pod in it and waits to be killed.
CHILD = textwrap.dedent("""
    import signal, sys
    from pathlib import Path
    from configmirror_testing.node import NodeCluster
    from configmirror_testing.wait import wait_for
    node = NodeCluster(Path(sys.argv[1]))
    node.start()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
           "spec": {"containers": [{"name": "pause", "image": node.pause_image,
                                    "imagePullPolicy": "Never"}]}}
    node.control_plane.api("POST", "/api/v1/namespaces/default/pods", pod)
    wait_for(lambda: node.control_plane.api("GET", "/api/v1/namespaces/default/pods/sleeper")
             ["status"].get("phase") == "Running", 120, "the pod to run")
    print("running", flush=True)
    signal.pause()
""")


def test_a_node_cluster_killed_with_its_owner_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    assets = require_node()
    sysctls = {key: read_sysctl(key) for key in SYSCTLS}
    log = tmp_path / "child.log"
    with open(log, "w") as out:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(assets)], stdout=out,
                                 stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_for(lambda: "running" in log.read_text(), 240, "the child's pod to run",
                 interval=0.5, abort=lambda: None if child.poll() is None else log.read_text())
    finally:
        child.send_signal(signal.SIGKILL)  # no stop(): its daemons die with it, not the rest
        child.wait(30)
    # The container and its shim outlive the owner, and so does everything on the host.
    left = HOST.leftovers()
    for kind in ("process", "mount", "interface", "cgroup", "chain", "folder"):
        assert any(kind in thing for thing in left), (kind, left)

    done = subprocess.run([sys.executable, "-m", "configmirror_testing.node", "clean"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert HOST.leftovers() == []
    # Forwarding stays on while another bridge (docker0) needs it; the rest is as it was.
    shared = SHARED_SYSCTLS if [b for b in bridges() if b.startswith(("docker", "br-"))] else ()
    assert {k: read_sysctl(k) for k in SYSCTLS if k not in shared} == {
        k: v for k, v in sysctls.items() if k not in shared}


def test_a_second_node_cluster_on_the_machine_waits_for_the_first_then_gives_up() -> None:
    assets = require_node()
    first = MachineLock(LOCK)
    first.acquire(0)
    try:
        with pytest.raises(NodeError) as refused:
            NodeCluster(assets, lock_timeout=1).start()
        assert f"another node cluster runs on this machine (process {os.getpid()})" in str(
            refused.value)
    finally:
        first.release()
    assert not HOST.state_dir.exists(), "the refused cluster touched the host"


def test_without_root_it_says_so() -> None:
    assets = require_node()
    # In a user namespace of its own, the process is not root (euid 65534), while the files
    # it needs are still its own.
    done = subprocess.run(
        ["unshare", "--user", sys.executable, "-c", "import sys; from pathlib import Path; "
         "from configmirror_testing.node import node_missing; "
         "print(node_missing(Path(sys.argv[1])))", str(assets)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the node cluster needs root"), done.stdout

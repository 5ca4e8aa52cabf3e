"""SIGTERM while the API server has stopped answering: the operator exits within its one
shutdown deadline (--drain-timeout + manager.STOP_MARGIN), every time.

Each run starts an operator (leader election on, so the lease and the published policy have
something to give back) through a fault proxy, lets it begin a fan-out of 150
replicas, then has the proxy hold every connection silently: open ones carry nothing more,
new ones are accepted and never answered. Its workers are then stuck in writes, its watches
open and silent, its lease and policy unreachable: nothing it could wait for will come. The
SIGTERM must still end it by the deadline, with one line naming what did not stop. Before the
shutdown had one deadline, each part's wait was bounded but not their sum: a cold CI run once
took more than 30 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from configmirror.operator.manager import STOP_MARGIN
from configmirror.replication.spec import REPLICATE_TO_MATCHING
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators, configmap
from configmirror_testing.faultproxy import FaultProxy
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]

FANOUT = 150  # few enough that setting them up and cleaning them away is quick
# Each run waits out the whole deadline (12 s): nothing it waits for ever comes. Five runs
# show the deadline holds run after run, with leases and policies left behind by the last.
RUNS = 5
DRAIN = 2.0
DEADLINE = DRAIN + STOP_MARGIN
# Past the deadline: the signal's delivery, the manager seeing it (it looks every 50 ms),
# flushing the log and the exit itself. A process that holds its exit for a thread is far
# past it: the requests it would wait for have a 30 s timeout.
SLACK = 2.0
# 10 writes a second: the fan-out takes 15 s, so the workers are mid-way when the wire goes
# silent, however fast the machine.
FLAGS = ("--kube-api-qps", "10", "--kube-api-burst", "1", "--drain-timeout", f"{DRAIN:g}s",
         "--leader-elect")


class Fanout:
    """One source and the namespaces it is replicated to, shared by every run."""

    def __init__(self, cluster: Cluster, home: str, targets: list[str]) -> None:
        self.cluster = cluster
        self.home = home
        self.targets = set(targets)

    def at(self, version: str) -> int:
        """How many replicas hold `version` (one LIST)."""
        found = self.cluster.core.list_config_map_for_all_namespaces(
            label_selector="configmirror.io/replica=true", field_selector="metadata.name=cfg")
        return sum(1 for cm in found.items
                   if cm.metadata.namespace in self.targets and (cm.data or {}) == {
                       "v": version})


@pytest.fixture(scope="module")
def fanout(cluster: Cluster) -> Iterator[Fanout]:
    spaces = Namespaces(cluster, "shutdown")
    try:
        home = spaces()
        label = f"shutdown-{home}"
        targets = [spaces(labels={"shutdown": label}, name=f"{home}-{i:03d}")
                   for i in range(FANOUT)]
        cluster.core.create_namespaced_config_map(home, configmap(
            "cfg", {REPLICATE_TO_MATCHING: f"shutdown={label}"}, data={"v": "none"}))
        yield Fanout(cluster, home, targets)
    finally:
        spaces.cleanup()  # the leases and policies the silenced operators could not withdraw


@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[FaultProxy]:
    plane = cluster.require_plane()
    with FaultProxy((plane.address, plane.apiserver_port)) as running:
        yield running


@pytest.mark.parametrize("run", range(RUNS))
def test_sigterm_with_the_api_server_silent_exits_within_the_deadline(
        run: int, fanout: Fanout, proxy: FaultProxy, operators: Operators,
        tmp_path: Path) -> None:
    version = f"run-{run}"
    fanout.cluster.core.patch_namespaced_config_map("cfg", fanout.home,
                                                    {"data": {"v": version}})
    kubeconfig = proxy.write_kubeconfig(fanout.cluster.kubeconfig, tmp_path / "via-proxy")
    # A lease of its own: the last run's was never released (its server was silent).
    operator = operators(*FLAGS, "--leader-election-namespace", fanout.home,
                         "--leader-election-id", unique_name(f"shutdown-{run}"),
                         kubeconfig=kubeconfig)
    wait_for(lambda: fanout.at(version) >= 20, timeout=60, interval=0.1,
             what="the fan-out to be under way")
    assert operator.scrape().value("configmirror_work_pending", state="queued") >= 1, \
        "the wire must go silent mid-way"
    proxy.answer_new(False)
    proxy.silent_drop()
    signalled = time.monotonic()
    code = operator.stop(timeout=DEADLINE + SLACK)  # fails with the stacks past that
    took = time.monotonic() - signalled
    print(f"run {run}: exited {code} {took:.1f} s after SIGTERM (deadline {DEADLINE:g} s)")
    assert code == 0, operator.log_tail()
    lines = operator.log().splitlines()
    shutdown = [line for line in lines if "did not stop within" in line]
    assert len(shutdown) == 1, operator.log_tail()
    assert "workers" in shutdown[0], "the workers were stuck in writes the server never answered"
    assert fanout.at(version) < FANOUT, "the SIGTERM must land mid-way"

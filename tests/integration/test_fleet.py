"""One source, many clusters: the home cluster (the suite's control plane) and two members,
b and c, each a control plane of its own behind a fault proxy (the `members` fixture). The
operator runs with --member-clusters and finds them as Secrets in its namespace."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from configmirror.replication.spec import (
    REPLICATE_TO,
    REPLICATE_TO_CLUSTERS,
    REPLICATE_TO_CLUSTERS_MATCHING,
    SOURCE_CLUSTER,
)
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators, configmap, events, read
from configmirror_testing.fleet import Member, Members
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]

HOME = "local"


def data_of(cluster: Cluster, namespace: str, name: str = "ca") -> dict[str, str] | None:
    found = read(cluster, namespace, name)
    return dict(found.data or {}) if found is not None else None


def holds(cluster: Cluster, namespace: str, value: str, name: str = "ca") -> Callable[[], bool]:
    return lambda: data_of(cluster, namespace, name) == {"v": value}


def add_cluster(home: Cluster, member: Member, namespace: str,
                labels: dict[str, str] | None = None) -> None:
    home.core.create_namespaced_secret(namespace, member.cluster_secret(  # type: ignore[arg-type]
        labels=labels, namespace=namespace))


def fleet_operator(operators: Operators, namespace: str, *flags: str) -> OperatorProcess:
    """An operator of the fleet: members on, its namespace (the cluster Secrets') given as a
    pod would have it."""
    return operators("--member-clusters", f"--operator-namespace={namespace}", *flags)


def member_writes(operator: OperatorProcess, cluster: str) -> float:
    return sum(operator.metric("configmirror_cluster_replica_writes_total", cluster=cluster,
                               action=action) for action in ("create", "update", "delete"))


@pytest.fixture
def fleet(cluster: Cluster, members: Members, namespaces: Namespaces,
          member_namespaces: dict[str, Namespaces]) -> dict[str, Any]:
    """A team namespace in each cluster (one name everywhere), the operator's namespace in
    home with both members' Secrets, and a source namespace."""
    team = unique_name("team")
    spaces = {HOME: namespaces(name=team)}
    for member in members:
        member_namespaces[member.name](name=team)
    home_ns, src = namespaces(), namespaces()
    add_cluster(cluster, members.b, home_ns, {"region": "eu"})
    add_cluster(cluster, members.c, home_ns, {"region": "us"})
    return {"team": team, "operator_namespace": home_ns, "src": src, "spaces": spaces}


def test_a_source_for_every_cluster_converges_repairs_and_writes_nothing_on_a_restart(
        cluster: Cluster, members: Members, member_namespaces: dict[str, Namespaces],
        operators: Operators, fleet: dict[str, Any]) -> None:
    team, src = fleet["team"], fleet["src"]
    clusters = {HOME: cluster, "b": members.b.cluster, "c": members.c.cluster}
    cluster.core.create_namespaced_config_map(src, configmap(  # type: ignore[arg-type]
        "ca", {REPLICATE_TO: "team-*", REPLICATE_TO_CLUSTERS: "*"}, data={"v": "1"}))
    operator = fleet_operator(operators, fleet["operator_namespace"])
    for name, where in clusters.items():
        wait_for(holds(where, team, "1"), timeout=30, what=f"the replica in cluster {name}")
    replica = read(members.b.cluster, team, "ca")
    assert replica is not None and replica.metadata is not None
    assert (replica.metadata.annotations or {})[SOURCE_CLUSTER] == HOME
    assert SOURCE_CLUSTER not in (read(cluster, team, "ca").metadata.annotations or {})  # type: ignore[union-attr]

    # A new namespace in a member gets its replica within 2 s.
    late = member_namespaces["c"](name=unique_name("team"))
    wait_for(holds(members.c.cluster, late, "1"), timeout=2, what="the new namespace's replica")
    # Deleted and edited by hand in a member: restored within 2 s.
    members.b.cluster.core.delete_namespaced_config_map("ca", team)
    members.c.cluster.core.patch_namespaced_config_map("ca", team, {"data": {"v": "mine"}})
    wait_for(holds(members.b.cluster, team, "1"), timeout=2, what="the deleted replica back")
    wait_for(holds(members.c.cluster, team, "1"), timeout=2, what="the edited replica repaired")
    # An edit reaches every cluster.
    cluster.core.patch_namespaced_config_map("ca", src, {"data": {"v": "2"}})
    for name, where in clusters.items():
        for space in ([team, late] if name == "c" else [team]):
            wait_for(holds(where, space, "2"), timeout=10, what=f"the edit in cluster {name}")
    operator.wait_idle()
    assert member_writes(operator, "b") >= 2 and member_writes(operator, "c") >= 3

    # A restart writes nothing, in any cluster.
    operator.stop()
    again = fleet_operator(operators, fleet["operator_namespace"])
    wait_for(lambda: again.metric("configmirror_cluster_reachable", cluster="b") == 1,
             timeout=30, what="the restarted operator to reach b")
    again.wait_idle()
    assert again.writes() == 0
    assert member_writes(again, "b") == member_writes(again, "c") == 0


def test_an_object_not_ours_in_a_member_is_a_conflict_and_never_written(
        cluster: Cluster, members: Members, operators: Operators,
        fleet: dict[str, Any]) -> None:
    team, src = fleet["team"], fleet["src"]
    members.b.cluster.core.create_namespaced_config_map(team, configmap(  # type: ignore[arg-type]
        "ca", data={"mine": "b"}))
    cluster.core.create_namespaced_config_map(src, configmap(  # type: ignore[arg-type]
        "ca", {REPLICATE_TO: "team-*", REPLICATE_TO_CLUSTERS_MATCHING: "region"},
        data={"v": "1"}))
    fleet_operator(operators, fleet["operator_namespace"])
    wait_for(holds(members.c.cluster, team, "1"), timeout=30, what="the replica in c")
    conflict = wait_for(lambda: [e for e in events(cluster, src, "ca", "TargetConflict")
                                 if (e.message or "").startswith("cluster b: ")],
                        timeout=30, what="TargetConflict naming cluster b")
    assert f"{team}/ca exists and is not a replica" in (conflict[0].message or "")
    assert data_of(members.b.cluster, team) == {"mine": "b"}
    assert read(cluster, team, "ca") is None, "selected by labels, home has none: not reached"


def configmirror(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "configmirror", *args, "--kubeconfig",
                           str(kubeconfig)], capture_output=True, text=True, timeout=120,
                          check=False)


def given_up(operator: OperatorProcess) -> float:
    return operator.metric("configmirror_reconcile_given_up_total")


@pytest.mark.parametrize("fault", ["killed", "silent"])
def test_a_member_down_or_silent_holds_back_no_other_cluster_and_catches_up(
        cluster: Cluster, members: Members, operators: Operators, fleet: dict[str, Any],
        fault: str) -> None:
    """Member b's API server killed for 60 s, or every connection to it silently dropped
    for 30 s, while the source is edited: home and c hold the edit as fast as with b
    healthy, status names b as unreachable, wait times out naming b; b catches up within
    30 s of its return; nothing is given up."""
    team, src, b = fleet["team"], fleet["src"], members.b
    cluster.core.create_namespaced_config_map(src, configmap(  # type: ignore[arg-type]
        "ca", {REPLICATE_TO: "team-*", REPLICATE_TO_CLUSTERS: "*"}, data={"v": "1"}))
    operator = fleet_operator(operators, fleet["operator_namespace"])
    for where in (cluster, b.cluster, members.c.cluster):
        wait_for(holds(where, team, "1"), timeout=30, what="the first replicas")
    operator.wait_idle()
    admin = cluster.kubeconfig
    # As an operator outside a pod publishes no policy, the commands are told its flags.
    ours = ("--member-clusters", f"--operator-namespace={fleet['operator_namespace']}")
    outage = b.down(60) if fault == "killed" else _Partitioned(b, 30)
    with outage:
        cluster.core.patch_namespaced_config_map("ca", src, {"data": {"v": "2"}})
        wait_for(holds(cluster, team, "2"), timeout=2, what="the edit at home")
        wait_for(holds(members.c.cluster, team, "2"), timeout=2, what="the edit in c")
        shown = configmirror("status", f"{src}/ca", "-o", "json", *ours, kubeconfig=admin)
        assert shown.returncode == 0, shown.stderr
        reached = {c["name"]: c for c in json.loads(shown.stdout)["clusters"]}
        assert not reached["b"]["reachable"] and "unreachable" in reached["b"]["error"]
        assert reached["c"]["reachable"] and reached[HOME]["reachable"]
        waited = configmirror("wait", f"{src}/ca", "--timeout=3s", *ours, kubeconfig=admin)
        assert waited.returncode == 2, waited.stderr
        assert "not in sync after 3s in cluster(s) b" in waited.stderr, waited.stderr
    wait_for(holds(b.cluster, team, "2"), timeout=30, what="b to catch up after its return")
    operator.wait_idle()
    assert given_up(operator) == 0
    done = configmirror("-o", "json", "wait", f"{src}/ca", "--timeout=30s", *ours,
                        kubeconfig=admin)
    assert done.returncode == 0, done.stderr
    assert {c["name"] for c in json.loads(done.stdout)["clusters"]} == {HOME, "b", "c"}


class _Partitioned:
    """Every connection to `member` silent for `seconds` (the body's time counted in)."""

    def __init__(self, member: Member, seconds: float) -> None:
        self.member, self.seconds = member, seconds

    def __enter__(self) -> None:
        self.start = time.monotonic()
        self.member.partition()

    def __exit__(self, *_exc: object) -> None:
        left = self.seconds - (time.monotonic() - self.start)
        if left > 0:
            time.sleep(left)  # the fault's length, not a wait for a condition
        self.member.heal()

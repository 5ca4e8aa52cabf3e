"""One source, many clusters: the home cluster (the suite's control plane) and two members,
b and c, each a control plane of its own behind a fault proxy (the `members` fixture). The
operator runs with --member-clusters and finds them as Secrets in its namespace."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from configmirror.client.events import EventRecorder
from configmirror.client.kube import Kube, load_configuration
from configmirror.client.tokens import token_times
from configmirror.clock import FakeClock
from configmirror.metrics import Metrics
from configmirror.operator.caches import ClusterInformers, replicated_kinds
from configmirror.operator.fleet import Fleet, MemberCluster
from configmirror.operator.settings import Settings
from configmirror.replication.clusters import Member as Member_
from configmirror.replication.clusters import member_of
from configmirror.replication.spec import (
    REPLICATE_TO,
    REPLICATE_TO_CLUSTERS,
    REPLICATE_TO_CLUSTERS_MATCHING,
    SOURCE_CLUSTER,
    ReplicaRules,
)
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators, configmap, events, read
from configmirror_testing.fleet import Member, Members
from configmirror_testing.memberside import remove_member_side
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


# -- credentials: cluster add, renewal, a revoked token ----------------------------------------


def home_and_member(home: Path, member: Member, path: Path) -> Path:
    """A kubeconfig of two contexts: `home` (the home cluster's admin) and the member's name
    (its admin, through its proxy, as the operator reaches it)."""
    ours, theirs = (yaml.safe_load(Path(p).read_text()) for p in (home,
                                                                    member.proxied_kubeconfig))
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "current-context": "home",
                           "clusters": [], "users": [], "contexts": []}
    for name, config in (("home", ours), (member.name, theirs)):
        context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c for c in config["clusters"]
                       if c["name"] == context["context"]["cluster"])
        user = next(u for u in config["users"] if u["name"] == context["context"]["user"])
        doc["clusters"].append({"name": name, "cluster": cluster["cluster"]})
        doc["users"].append({"name": name, "user": user["user"]})
        doc["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def added_b(cluster: Cluster, members: Members, namespaces: Namespaces,
            member_namespaces: dict[str, Namespaces], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Member b added with `configmirror cluster add` (a ServiceAccount token of ten
    minutes), c with its admin's kubeconfig, a team namespace in each; the member side
    removed from b afterwards."""
    home_ns, src, team = namespaces(), namespaces(), unique_name("team")
    namespaces(name=team)
    for member in members:
        member_namespaces[member.name](name=team)
    add_cluster(cluster, members.c, home_ns)
    kubeconfig = home_and_member(cluster.kubeconfig, members.b, tmp_path / "kubeconfig")
    done = configmirror("cluster", "add", "b", "--context", "b", "--home-context", "home",
                        f"--operator-namespace={home_ns}", "--token-duration=10m",
                        "--label", "region=eu", kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield {"operator_namespace": home_ns, "src": src, "team": team,
               "kubeconfig": kubeconfig}
    finally:
        remove_member_side(members.b.cluster, namespace=True)


def secret_member(cluster: Cluster, namespace: str, name: str) -> Member_:
    raw = client.ApiClient().sanitize_for_serialization(  # type: ignore[no-untyped-call]
        cluster.core.read_namespaced_secret(f"cluster-{name}", namespace))
    return member_of(raw, HOME)


def test_tokens_of_ten_minutes_are_renewed_before_they_expire_through_30_minutes(
        cluster: Cluster, members: Members, added_b: dict[str, Any]) -> None:
    """The renewer on a fake clock, against the real member and home API servers: each
    token (ten minutes) is renewed with a third of its life left, written back into the
    Secret, and the member's client goes on with it; 30 minutes of that clock."""
    home_ns = added_b["operator_namespace"]
    clock = FakeClock(time.time())
    settings = Settings(operator_namespace=home_ns, member_clusters=True)
    kube = Kube(load_configuration(str(cluster.kubeconfig)))
    metrics = Metrics()
    recorder = EventRecorder(kube)
    rules = ReplicaRules.from_flags("", "")
    home = ClusterInformers(kube, replicated_kinds(settings), rules)
    fleet = Fleet(kube, settings, home, rules, recorder, metrics, clock)
    member = secret_member(cluster, home_ns, "b")
    running = MemberCluster(member, home, settings, rules, recorder, metrics, clock)
    space = added_b["team"]
    tokens = [running.kube.configuration.api_key["BearerToken"]]
    try:
        for minute in range(0, 31):
            fleet._renew(running)
            now = running.kube.configuration.api_key["BearerToken"]
            if now != tokens[-1]:
                tokens.append(now)
                stored = secret_member(cluster, home_ns, "b")
                assert stored.kubeconfig == running.member.kubeconfig, "written back"
                issued, expires = token_times(stored.kubeconfig) or (0.0, 0.0)
                assert expires - issued == pytest.approx(600, abs=5)
            # Writing goes on with the token in use.
            running.kube.request("create", f"/api/v1/namespaces/{space}/configmaps", body={
                "metadata": {"name": f"minute-{minute}"}, "data": {}})
            clock.step(60)
        # Renewed at 400, 800, 1200 and 1600 s of a token's ten minutes: never past 2/3.
        assert len(tokens) == 5, len(tokens)
        assert metrics.cluster_token_expiry.labels("b")._value.get() > time.time() + 300
    finally:
        running.kube.close()
        kube.close()


def test_a_revoked_token_is_an_event_and_a_metric_naming_the_cluster_and_no_one_elses_problem(
        cluster: Cluster, members: Members, operators: Operators,
        added_b: dict[str, Any]) -> None:
    src, team = added_b["src"], added_b["team"]
    cluster.core.create_namespaced_config_map(src, configmap(  # type: ignore[arg-type]
        "ca", {REPLICATE_TO: team, REPLICATE_TO_CLUSTERS: "b,c"}, data={"v": "1"}))
    operator = fleet_operator(operators, added_b["operator_namespace"])
    for member in members:
        wait_for(holds(member.cluster, team, "1"), timeout=30, what=f"the replica in {member.name}")
    assert operator.metric("configmirror_cluster_reachable", cluster="b") == 1
    assert operator.metric("configmirror_cluster_token_expiry_timestamp_seconds",
                           cluster="b") > time.time() + 300
    members.b.cluster.core.delete_namespaced_service_account("configmirror-member",
                                                             "configmirror")
    refused = wait_for(lambda: [e for e in events(cluster, added_b["operator_namespace"],
                                                  "cluster-b", "ClusterUnreachable")],
                       timeout=30, what="the Event on b's Secret")
    assert "cluster b: its credentials are refused (401" in (refused[0].message or "")
    assert operator.metric("configmirror_cluster_reachable", cluster="b") == 0
    cluster.core.patch_namespaced_config_map("ca", src, {"data": {"v": "2"}})
    wait_for(holds(members.c.cluster, team, "2"), timeout=5, what="c, unaffected")
    assert operator.proc.poll() is None, "no crash"


# -- the inventory: a Secret removed, a cluster no longer selected, a bad Secret ---------------


def test_a_removed_cluster_keeps_its_replicas_and_one_no_longer_selected_loses_them(
        cluster: Cluster, members: Members, operators: Operators,
        fleet: dict[str, Any]) -> None:
    team, src, home_ns = fleet["team"], fleet["src"], fleet["operator_namespace"]
    cluster.core.create_namespaced_config_map(src, configmap(  # type: ignore[arg-type]
        "ca", {REPLICATE_TO: team, REPLICATE_TO_CLUSTERS_MATCHING: "region"},
        data={"v": "1"}))
    operator = fleet_operator(operators, home_ns, "--delete-grace=2s")
    for member in members:
        wait_for(holds(member.cluster, team, "1"), timeout=30, what=f"the replica in {member.name}")
    # c's Secret deleted: no longer managed, its replica stays (as on uninstall).
    cluster.core.delete_namespaced_secret("cluster-c", home_ns)
    wait_for(lambda: "cluster c: its Secret is gone" in operator.log(), timeout=30,
             what="the operator to let c go")
    # b relabelled out of the selector: its replica goes after the grace.
    cluster.core.patch_namespaced_secret("cluster-b", home_ns, {"metadata": {"labels": {
        "region": None}}})
    wait_for(lambda: read(members.b.cluster, team, "ca") is None, timeout=30,
             what="b's replica to go after the grace")
    operator.wait_idle()
    assert data_of(members.c.cluster, team) == {"v": "1"}, "a removed cluster keeps its replica"


def test_a_secret_that_cannot_be_used_is_an_invalid_cluster_event_and_the_rest_go_on(
        cluster: Cluster, members: Members, operators: Operators,
        fleet: dict[str, Any]) -> None:
    team, src, home_ns = fleet["team"], fleet["src"], fleet["operator_namespace"]
    bad = members.b.cluster_secret(name="d", namespace=home_ns)
    bad["data"] = {"kubeconfig": "bm90IGEga3ViZWNvbmZpZw=="}  # "not a kubeconfig"
    cluster.core.create_namespaced_secret(home_ns, bad)  # type: ignore[arg-type]
    cluster.core.create_namespaced_config_map(src, configmap(  # type: ignore[arg-type]
        "ca", {REPLICATE_TO: team, REPLICATE_TO_CLUSTERS: "*"}, data={"v": "1"}))
    fleet_operator(operators, home_ns)
    invalid = wait_for(lambda: events(cluster, home_ns, "cluster-d", "InvalidCluster"),
                       timeout=30, what="InvalidCluster")
    assert "cluster d: kubeconfig: not a kubeconfig" in (invalid[0].message or "")
    for member in members:
        wait_for(holds(member.cluster, team, "1"), timeout=30, what=f"the replica in {member.name}")

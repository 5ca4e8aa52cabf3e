"""Lifecycle safety, end to end: removals wait out --delete-grace, retain releases, sync once.

What the operator writes is read from the API server's audit log (its user agent is
configmirror/...), and when: a removal is checked against the time its cause reached the
server, by the server's own clock. "The operator has seen the cause" is its
configmirror_pending_removals gauge, so no test sleeps to hope it has.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest

from configmirror.replication.model import RELEASED_FROM, REPLICA_LABEL
from configmirror.replication.spec import ON_DELETE, REPLICATE_TO, REPLICATE_TO_MATCHING, SYNC
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import (
    Operator,
    Operators,
    configmap,
    operator_writes,
    read,
    wait_replica,
)
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]

# The grace of the tests that undo a removal's cause within it and then wait it out.
GRACE = "15s"


def stamped(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")
                                  ).timestamp()


def admin_writes(cluster: Cluster, namespace: str, verb: str) -> list[dict[str, Any]]:
    """The test's own ConfigMap writes into `namespace` (not the operator's)."""
    return [e for e in cluster.audit()
            if not e.get("userAgent", "").startswith("configmirror/") and e.get("verb") == verb
            and (e.get("objectRef") or {}).get("resource") == "configmaps"
            and (e.get("objectRef") or {}).get("namespace") == namespace]


def pending(operator: Operator) -> float:
    return operator.metric("configmirror_pending_removals")


def versions(cluster: Cluster, namespaces: list[str]) -> dict[str, tuple[str, str]]:
    found = {}
    for ns in namespaces:
        cm = read(cluster, ns, "cfg")
        assert cm is not None, f"{ns}/cfg is missing"
        found[ns] = (cm.metadata.uid, cm.metadata.resource_version)
    return found


def test_a_source_deleted_and_recreated_within_the_grace_costs_its_replicas_no_write(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, targets = namespaces(), [namespaces() for _ in range(3)]
    body = configmap("cfg", {REPLICATE_TO: ",".join(targets)}, data={"v": "1"})
    cluster.core.create_namespaced_config_map(src, body)
    # Long enough for the round trip below (milliseconds), short enough to wait out: the
    # last wait_idle() lasts until the called-off removal's time has passed.
    operator = operators(f"--delete-grace={GRACE}")
    for t in targets:
        wait_replica(cluster, t, {"v": "1"})
    operator.wait_idle()
    before, written = versions(cluster, targets), len(operator_writes(cluster, targets))
    # kubectl replace --force, Helm or Argo CD replacing the object: gone, then back as it was.
    cluster.core.delete_namespaced_config_map("cfg", src)
    wait_for(lambda: pending(operator) == 3, what="the operator to see the removals' cause")
    cluster.core.create_namespaced_config_map(src, body)
    wait_for(lambda: pending(operator) == 0, what="the removals to be called off")
    operator.wait_idle()
    assert versions(cluster, targets) == before, "same objects, same versions"
    assert len(operator_writes(cluster, targets)) == written, "not one write"


def test_a_source_deleted_for_good_keeps_its_replicas_for_the_grace_then_loses_them(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, targets = namespaces(), [namespaces() for _ in range(3)]
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: ",".join(
        targets)}))
    operator = operators("--delete-grace=4s")
    for t in targets:
        wait_replica(cluster, t)
    cluster.core.delete_namespaced_config_map("cfg", src)
    wait_for(lambda: all(read(cluster, t, "cfg") is None for t in targets), timeout=30,
             what="the replicas to go after the grace")
    (deleted,) = admin_writes(cluster, src, "delete")
    removals = [e for e in operator_writes(cluster, targets) if e["verb"] == "delete"]
    assert len(removals) == 3
    # By the server's clock: every replica stayed the whole grace (the stamps are taken as
    # the server receives each request, so one arrives no earlier than its cause + 4 s).
    assert min(stamped(e) for e in removals) >= stamped(deleted) + 4.0
    assert pending(operator) == 0


def test_a_namespace_relabelled_out_and_back_within_the_grace_costs_nothing(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src = namespaces()
    label = f"lifecycle-{src}"
    target = namespaces(labels={label: "yes"})
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO_MATCHING: f"{label}=yes"}))
    operator = operators(f"--delete-grace={GRACE}")
    wait_replica(cluster, target)
    operator.wait_idle()
    before, written = versions(cluster, [target]), len(operator_writes(cluster, [target]))
    cluster.core.patch_namespace(target, {"metadata": {"labels": {label: "no"}}})
    wait_for(lambda: pending(operator) == 1, what="the operator to see the label go")
    cluster.core.patch_namespace(target, {"metadata": {"labels": {label: "yes"}}})
    wait_for(lambda: pending(operator) == 0, what="the removal to be called off")
    operator.wait_idle()
    assert versions(cluster, [target]) == before
    assert len(operator_writes(cluster, [target])) == written


def test_retain_releases_the_replicas_and_a_later_edit_of_one_is_never_reverted(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: f"{a},{b}", ON_DELETE: "retain", "team": "x"},
        data={"v": "1"}, labels={"tier": "web"}))
    operator = operators("--delete-grace=2s")
    replica = wait_replica(cluster, a, {"v": "1"})
    wait_replica(cluster, b, {"v": "1"})
    assert replica.metadata.annotations[ON_DELETE] == "retain", "the replica remembers it"
    cluster.core.delete_namespaced_config_map("cfg", src)

    def released(ns: str) -> Any:
        cm = read(cluster, ns, "cfg")
        return cm is not None and RELEASED_FROM in (cm.metadata.annotations or {}) and cm

    for ns in (a, b):
        cm = wait_for(lambda ns=ns: released(ns), timeout=30, what=f"{ns}/cfg to be released")
        assert cm.data == {"v": "1"}, "its content stays"
        assert cm.metadata.annotations == {"team": "x", RELEASED_FROM: f"{src}/cfg"}
        assert cm.metadata.labels == {"tier": "web"}, "our marks are gone, the rest stays"
    # From now on it is the namespace's own: an edit stays, even after a restart.
    cluster.core.patch_namespaced_config_map("cfg", a, {"data": {"v": "mine"}})
    operator.wait_idle()
    assert operator.stop() == 0
    restarted = operators("--delete-grace=2s")
    restarted.wait_idle()
    after = read(cluster, a, "cfg")
    assert after is not None and after.data == {"v": "mine"}
    assert [e["verb"] for e in operator_writes(cluster, [a])] == ["create", "patch"]


def test_retain_survives_a_restart_during_the_grace(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a, ON_DELETE: "retain"}))
    first = operators("--delete-grace=60s")
    wait_replica(cluster, a)
    cluster.core.delete_namespaced_config_map("cfg", src)
    wait_for(lambda: pending(first) == 1, what="the removal to wait")
    assert first.stop() == 0
    # The new process starts the grace again, and still releases: the replica carries it.
    operators("--delete-grace=1s")
    wait_for(lambda: (cm := read(cluster, a, "cfg")) is not None
             and (cm.metadata.labels or {}).get(REPLICA_LABEL) is None, timeout=30,
             what="the replica to be released, not deleted")


def test_sync_once_creates_once_and_then_leaves_the_replica_alone(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a, SYNC: "once"}, data={"v": "1"}))
    operator = operators()
    wait_replica(cluster, a, {"v": "1"})
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    operator.wait_idle()
    assert read(cluster, a, "cfg").data == {"v": "1"}  # type: ignore[union-attr]
    cluster.core.patch_namespaced_config_map("cfg", a, {"data": {"v": "by hand"}})
    operator.wait_idle()
    assert read(cluster, a, "cfg").data == {"v": "by hand"}  # type: ignore[union-attr]
    # Deleted, it is created again, with the source's content now.
    cluster.core.delete_namespaced_config_map("cfg", a)
    wait_replica(cluster, a, {"v": "2"})


def test_plan_lists_a_pending_removal_with_its_grace(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    operator = operators()
    wait_replica(cluster, a)
    assert operator.stop() == 0  # plan alone looks at what is left
    cluster.core.delete_namespaced_config_map("cfg", src)

    def plan(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "configmirror", "plan", "--kubeconfig",
                               str(cluster.kubeconfig), "--namespace", src, *args],
                              capture_output=True, text=True, timeout=60, check=False)

    text = plan()
    assert text.returncode == 2, text.stderr
    assert f"delete   {a}/cfg  (in 60s: source deleted)" in text.stdout
    (p,) = json.loads(plan("--delete-grace", "90s", "--output", "json").stdout)["plans"]
    assert p["actions"] == [{"action": "delete", "namespace": a, "name": "cfg",
                             "why": "source deleted", "due_in": 90.0}]


def test_random_deletes_and_recreates_never_remove_a_replica_of_a_source_that_exists(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    rng = random.Random(20261201)
    src, targets = namespaces(), [namespaces() for _ in range(3)]
    names = [f"cfg-{i}" for i in range(3)]
    grace = 3.0
    operator = operators(f"--delete-grace={grace:g}s")

    def create(name: str, version: int) -> None:
        cluster.core.create_namespaced_config_map(src, configmap(
            name, {REPLICATE_TO: ",".join(targets)}, data={"v": str(version)}))

    def replicas_of(name: str, version: int) -> bool:
        return all((cm := read(cluster, t, name)) is not None and cm.data == {"v": str(version)}
                   for t in targets)

    version = dict.fromkeys(names, 1)
    for name in names:
        create(name, 1)
    for _ in range(12):
        name = rng.choice(names)
        wait_for(lambda name=name: replicas_of(name, version[name]), timeout=30,
                 what=f"{name}'s replicas")
        cluster.core.delete_namespaced_config_map(name, src)
        wait_for(lambda: pending(operator) >= len(targets), what="the removals to wait")
        if rng.random() < 0.5:  # outside the grace: let them go first
            wait_for(lambda name=name: all(read(cluster, t, name) is None for t in targets),
                     timeout=30, what=f"{name}'s replicas to go")
        version[name] += rng.choice([0, 1])  # back as it was, or edited
        create(name, version[name])
    for name in names:
        wait_for(lambda name=name: replicas_of(name, version[name]), timeout=30,
                 what=f"{name}'s replicas at the end")

    # No replica was removed while its source existed, or within the grace of a delete.
    history: dict[str, list[tuple[float, str]]] = {n: [] for n in names}
    for e in cluster.audit():
        ref = e.get("objectRef") or {}
        if ref.get("namespace") == src and ref.get("name") in history \
                and e.get("verb") in ("create", "delete") and e.get("responseStatus", {}).get(
                    "code", 0) < 300:
            history[ref["name"]].append((stamped(e), e["verb"]))
    for e in operator_writes(cluster, targets):
        if e["verb"] != "delete":
            continue
        name, when = e["objectRef"]["name"], stamped(e)
        last_at, last_verb = max(h for h in history[name] if h[0] <= when)
        assert last_verb == "delete", f"{name} removed at {when} while its source existed"
        assert when >= last_at + grace, f"{name} removed {when - last_at:.1f} s after its delete"

"""The fault suite: what breaks in real clusters, done to a real control plane.

docs/reliability.md lists what was tried and what held.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from configmirror.replication.spec import REPLICATE_TO, REPLICATE_TO_MATCHING
from configmirror.vocabulary import CONFIGMAP
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.controlplane import ControlPlane
from configmirror_testing.e2e import (
    Operator,
    Operators,
    configmap,
    events,
    read,
    requests_into,
    restricted_operator_identity,
    wait_replica,
)
from configmirror_testing.faultproxy import FaultProxy
from configmirror_testing.objects import cached
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane


def create_sources(cluster: Cluster, namespace: str, count: int, annotations: dict[str, str],
                   prefix: str) -> list[str]:
    """`count` sources named PREFIX-0000 on, created eight at once."""
    names = [f"{prefix}-{i:04d}" for i in range(count)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda name: cluster.core.create_namespaced_config_map(
            namespace, configmap(name, annotations, data={"name": name})), names))
    return names


def replicas_by_namespace(cluster: Cluster, namespaces: list[str]) -> dict[str, set[str]]:
    return {ns: {cm.metadata.name for cm in cluster.core.list_namespaced_config_map(
        ns, label_selector="configmirror.io/replica=true").items} for ns in namespaces}


def every_replica_equals_its_source(cluster: Cluster, namespaces: list[str]) -> list[str]:
    """Replicas (in `namespaces`) whose content is not what their source wants."""
    wrong = []
    for ns in namespaces:
        raw = cluster.api_client.sanitize_for_serialization(
            cluster.core.list_namespaced_config_map(
                ns, label_selector="configmirror.io/replica=true"))
        for item in raw["items"]:
            replica = cached(item, CONFIGMAP)
            source_ns, source_name = str(replica.replica_of).split("/")
            source = cluster.core.read_namespaced_config_map(source_name, source_ns)
            parsed = cached(cluster.api_client.sanitize_for_serialization(source), CONFIGMAP)
            assert parsed.compiled is not None
            if replica.content_hash != parsed.compiled.content_hash:
                wrong.append(f"{ns}/{replica.name}")
    return wrong


def healthy(operator: Operator) -> bool:
    return operator.probe("/healthz") == "ok"


def test_apiserver_killed_and_restarted_mid_replication(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    plane = cluster.require_plane()
    src = namespaces()
    targets = [namespaces(labels={"fault": src}) for _ in range(5)]
    operator = operators()
    create_sources(cluster, src, 100, {REPLICATE_TO_MATCHING: f"fault={src}"}, prefix="kill")
    wait_for(lambda: any(replicas_by_namespace(cluster, targets[:1]).values()), timeout=30,
             interval=0.01, what="replication to be under way")
    plane.stop_apiserver(kill=True)
    plane.start_apiserver()
    expected = {f"kill-{i:04d}" for i in range(100)}
    wait_for(lambda: all(names == expected for names in
                         replicas_by_namespace(cluster, targets).values()),
             timeout=90, interval=0.5, what="every replica after the restart")
    assert every_replica_equals_its_source(cluster, targets) == []
    assert healthy(operator), "a worker thread died (/healthz checks every worker)"


def test_a_10_s_apiserver_outage_right_after_an_edit_delays_replicas_by_seconds_not_a_resync(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    """Default flags (the resync is 10 minutes away). Under the default client-side limit
    (50/s, bursts of 100) the 200 updates take at least 2 s, so the kill lands mid-way."""
    plane = cluster.require_plane()
    src = namespaces()
    label = f"outage-{src}"
    targets = namespaces.many(200, labels={"fault": label})
    operator = operators()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO_MATCHING: f"fault={label}"}, data={"v": "1"}))

    def at(version: str) -> int:
        found = cluster.core.list_config_map_for_all_namespaces(
            label_selector="configmirror.io/replica=true", field_selector="metadata.name=cfg")
        spaces = set(targets)
        return sum(1 for cm in found.items
                   if cm.metadata.namespace in spaces and (cm.data or {}) == {"v": version})

    wait_for(lambda: at("1") == 200, timeout=60, what="200 replicas at v=1")
    operator.wait_idle()
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    wait_for(lambda: at("2") > 0, timeout=30, interval=0.01, what="the update under way")
    plane.stop_apiserver(kill=True)
    down = time.monotonic()
    # Read while the server is down, so no update can land after it: what was done before.
    half = operator.metric("configmirror_replica_writes_total", action="update")
    wait_for(lambda: operator.metric("configmirror_api_server_unavailable") == 1, timeout=10,
             what="the operator to say the API server does not answer")
    threading.Event().wait(10)  # the outage itself: what the test is about, not a hope
    plane.start_apiserver()
    print(f"apiserver down for {time.monotonic() - down:.1f} s")
    assert 0 < half < 200, "the outage must land mid-way"
    back = time.monotonic()
    wait_for(lambda: at("2") == 200, timeout=30, interval=0.2,
             what="every replica within 30 s of the apiserver's return")
    print(f"converged {time.monotonic() - back:.1f} s after the return ({half} done before)")
    assert operator.metric("configmirror_reconcile_given_up_total") == 0, \
        "an outage is not the object's fault: nothing is given up"
    wait_for(lambda: operator.metric("configmirror_api_server_unavailable") == 0,
             what="the outage gauge back to 0")
    assert events(cluster, src, "cfg", "ReplicationFailed") == []
    wait_for(lambda: events(cluster, src, "cfg", "Replicated"), timeout=30,
             what="the Replicated Event, written once the server was back")


def identity_whose_watch_can_be_revoked(cluster: Cluster, home: str, tmp: Path
                                        ) -> tuple[Path, Callable[[], None], Callable[[], None]]:
    """A ServiceAccount that may do what the operator does (ConfigMaps and Namespaces read,
    ConfigMaps written, Events). Returns its kubeconfig, a function that takes the list and
    watch away from it (its writes stay allowed), and one that removes its roles."""
    name = unique_name("watchless")
    rule, meta = client.V1PolicyRule, client.V1ObjectMeta
    roles = {f"{name}-watch": [rule(api_groups=[""], resources=["configmaps", "namespaces"],
                                    verbs=["get", "list", "watch"])],
             f"{name}-write": [rule(api_groups=[""], resources=["configmaps"],
                                    verbs=["create", "update", "patch", "delete"]),
                               rule(api_groups=[""], resources=["events"],
                                    verbs=["create", "patch"])]}
    subject = [client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=home)]
    for role, rules in roles.items():
        cluster.rbac.create_cluster_role(client.V1ClusterRole(metadata=meta(name=role),
                                                              rules=rules))
        cluster.rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
            metadata=meta(name=role), subjects=subject, role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role)))

    def revoke(suffixes: tuple[str, ...]) -> None:
        for role in roles:
            if role.endswith(suffixes):
                with contextlib.suppress(client.ApiException):
                    cluster.rbac.delete_cluster_role_binding(role)
                    cluster.rbac.delete_cluster_role(role)

    return (cluster.service_account_kubeconfig(home, name, tmp / f"{name}.kubeconfig"),
            lambda: revoke(("-watch",)), lambda: revoke(("-watch", "-write")))


def test_a_write_the_dying_apiserver_applied_but_never_answered_holds_no_replica_back(
        cluster: Cluster, namespaces: Namespaces, operators: Operators, tmp_path: Path) -> None:
    """Issue 42. The first key to meet the outage is the one whose write was in flight: the
    server applied it and its answer was lost (the fault proxy drops the answers, then the
    server is killed). Until the watch is back, that key can only conflict with its own write.
    The other replicas must not wait for the watch: here it cannot come back (the operator's
    list and watch are refused from before the return on), standing in for the informers'
    backoff, which can outlast the outage by a minute."""
    plane = cluster.require_plane()
    home, src = namespaces(), namespaces()
    targets = [namespaces() for _ in range(12)]
    kubeconfig, revoke_watch, remove = identity_whose_watch_can_be_revoked(cluster, home,
                                                                           tmp_path)
    proxy = FaultProxy((plane.address, plane.apiserver_port)).start()
    try:
        # 4 writes a second: the fan-out is still going when the write in flight is cut off.
        operator = operators("--kube-api-qps", "4", "--kube-api-burst", "1",
                             kubeconfig=proxy.write_kubeconfig(kubeconfig, tmp_path / "via"))
        cluster.core.create_namespaced_config_map(src, configmap(
            "cfg", {REPLICATE_TO: ",".join(targets)}, data={"v": "1"}))

        def at(version: str) -> int:
            return sum(1 for ns in targets
                       if ((cm := read(cluster, ns, "cfg")) is not None
                           and (cm.data or {}) == {"v": version}))

        wait_for(lambda: at("1") == len(targets), timeout=30, what="the replicas at v=1")
        operator.wait_idle()
        cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
        wait_for(lambda: at("2") >= 1, timeout=30, interval=0.02, what="the fan-out under way")
        proxy.drop_answers(True)
        applied = at("2")
        wait_for(lambda: at("2") > applied, timeout=10, interval=0.02,
                 what="a write the server applies and never answers")
        revoke_watch()
        plane.stop_apiserver(kill=True)
        wait_for(lambda: operator.metric("configmirror_api_server_unavailable") == 1,
                 timeout=30, what="the operator to see the outage")
        proxy.heal()
        plane.start_apiserver()
        print(f"{at('2')} of {len(targets)} replicas at v=2 at the return")
        wait_for(lambda: at("2") == len(targets), timeout=15, interval=0.2,
                 what="every replica within 15 s of the return, the watch still refused")
        assert operator.metric("configmirror_reconcile_given_up_total") == 0
    finally:
        remove()
        proxy.stop()


def write_into_etcd(plane: ControlPlane, obj: dict[str, Any]) -> None:
    """Store `obj` (a ConfigMap as the API returned it) in etcd directly, as JSON, which the
    apiserver reads as well as its own protobuf: how a source changes while no apiserver
    runs. Its resourceVersion is etcd's revision of the write."""
    meta = obj["metadata"]
    meta.pop("resourceVersion", None)
    key = f"/registry/configmaps/{meta['namespace']}/{meta['name']}"
    done = subprocess.run([str(plane.assets / "etcdctl"), f"--endpoints={plane.etcd_endpoint}",
                           "put", key], input=json.dumps(obj), capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, f"etcdctl put {key}: {done.stderr}"


def test_a_source_made_invalid_while_the_apiserver_is_down_gets_its_event_within_2_s_of_its_return(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    """The Event recorder begins its backoff in the outage (the Replicated Event of an edit
    made just before it fails), and the informers theirs; none may outlast the outage."""
    plane = cluster.require_plane()
    src, target = namespaces(), namespaces()
    operator = operators()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: target}, data={"v": "1"}))
    wait_replica(cluster, target, {"v": "1"})
    operator.wait_idle()
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    wait_replica(cluster, target, {"v": "2"})
    source = cluster.api_client.sanitize_for_serialization(
        cluster.core.read_namespaced_config_map("cfg", src))
    plane.stop_apiserver(kill=True)  # before the Replicated Event is due (2 s of quiet)
    try:
        wait_for(lambda: "cannot record Event Replicated" in operator.log(), timeout=30,
                 interval=0.02, what="the Event recorder to meet the outage")
        failed = time.monotonic()
        source["metadata"]["annotations"][REPLICATE_TO_MATCHING] = "tier in (a"
        write_into_etcd(plane, source)
        # The outage itself. The recorder tries again 0.5, 1.5, 3.5, 7.5, 15.5 and 31.5 s
        # after its first failure: the server comes back in the longest gap, so a backoff
        # begun in the outage would outlast it by 10 s (the restart takes a few seconds).
        threading.Event().wait(max(failed + 16.0 - time.monotonic(), 0.0))
    finally:
        plane.start_apiserver()  # returns once /readyz answers: the server is back
    wait_for(lambda: events(cluster, src, "cfg", "InvalidSpec"), timeout=2, interval=0.05,
             what="the InvalidSpec Event within 2 s of the apiserver's return")
    wait_for(lambda: events(cluster, src, "cfg", "Replicated"), timeout=2, interval=0.05,
             what="the Replicated Event that met the outage, before it")
    assert read(cluster, target, "cfg").data == {"v": "2"}, "an invalid spec changes nothing"


def test_compaction_410_while_sources_change_in_the_gap(
        uncached_cluster: Cluster, tmp_path: Path) -> None:
    plane = uncached_cluster.require_plane()
    core = uncached_cluster.core
    ns = Namespaces(uncached_cluster, "gap")
    src, target = ns(), ns()
    ops = Operators(uncached_cluster, tmp_path)
    try:
        operator = ops()
        core.create_namespaced_config_map(src, configmap("doomed", {REPLICATE_TO: target}))
        wait_for(lambda: read(uncached_cluster, target, "doomed"), what="the first replica")
        os.kill(operator.proc.pid, signal.SIGSTOP)  # the operator sees nothing from here on
        try:
            # Its watch connections go too. (Killed: a graceful stop waits on the frozen
            # client's open watches.)
            plane.stop_apiserver(kill=True)
            plane.start_apiserver()
            core.delete_namespaced_config_map("doomed", src)
            core.create_namespaced_config_map(src, configmap("born", {REPLICATE_TO: target}))
            plane.compact()
        finally:
            os.kill(operator.proc.pid, signal.SIGCONT)
        wait_for(lambda: read(uncached_cluster, target, "doomed") is None, timeout=30,
                 what="the replica of the source deleted in the gap to go")
        wait_for(lambda: read(uncached_cluster, target, "born"), timeout=30,
                 what="the replica of the source created in the gap")
        assert operator.metric("configmirror_informer_relists_total",
                               resource="configmaps") >= 2, "the 410 must cause a relist"
    finally:
        ops.stop_all()
        ns.cleanup()


def test_conflict_storm_then_convergence(cluster: Cluster, namespaces: Namespaces,
                                         operators: Operators) -> None:
    src = namespaces()
    targets = [namespaces() for _ in range(10)]
    operator = operators()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: ",".join(targets)}, data={"v": "source"}))
    for ns in targets:
        wait_for(lambda ns=ns: read(cluster, ns, "cfg"), what=f"replica in {ns}")
    stop = threading.Event()
    rewrites = Counter[str]()

    def storm() -> None:  # another controller fighting over the replicas, bounded in time
        deadline = time.monotonic() + 4
        while not stop.is_set() and time.monotonic() < deadline:
            for ns in targets:
                try:
                    cluster.core.patch_namespaced_config_map(
                        "cfg", ns, {"data": {"v": f"storm-{rewrites[ns]}"}})
                    rewrites[ns] += 1
                except client.ApiException:
                    pass

    stormer = threading.Thread(target=storm)
    stormer.start()
    stormer.join(timeout=30)
    stop.set()
    stormer.join(timeout=10)
    assert not stormer.is_alive()
    assert sum(rewrites.values()) > len(targets), "the storm did not happen"
    for ns in targets:
        wait_for(lambda ns=ns: (read(cluster, ns, "cfg").data or {}) == {"v": "source"},  # type: ignore[union-attr]
                 timeout=30, what=f"{ns} to converge after the storm")
    assert healthy(operator)


def test_rbac_revoked_for_one_namespace_then_restored(
        cluster: Cluster, namespaces: Namespaces, operators: Operators, tmp_path: Path) -> None:
    src, kept, revoked = namespaces(), namespaces(), namespaces()
    kubeconfig, user = restricted_operator_identity(cluster, src, [kept, revoked, src],
                                                     tmp_path)
    resync = 2.0
    operator = operators("--resync-period", str(resync), kubeconfig=kubeconfig)
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: f"{kept},{revoked}"}, data={"v": "1"}))
    for ns in (kept, revoked):
        wait_for(lambda ns=ns: read(cluster, ns, "cfg"), what=f"replica in {ns}")
    binding = cluster.rbac.read_namespaced_role_binding(
        next(b.metadata.name for b in cluster.rbac.list_namespaced_role_binding(revoked).items),
        revoked)
    cluster.rbac.delete_namespaced_role_binding(binding.metadata.name, revoked)
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    wait_for(lambda: (read(cluster, kept, "cfg").data or {}) == {"v": "2"},  # type: ignore[union-attr]
             what="the edit to reach the namespace still allowed")
    wait_for(lambda: events(cluster, src, "cfg", "ReplicationFailed"), what="the Warning")
    # Let a few resyncs pass (each may try once), counted by the operator's own reconciles.
    seen = operator.metric("controller_runtime_reconcile_total")
    wait_for(lambda: operator.metric("controller_runtime_reconcile_total") >= seen + 3,
             timeout=20, what="three more reconciles (resyncs)")
    # The log before the audit log: the apiserver audits a request (blocking mode) before
    # it answers, so every line read here has its audit entry.
    forbidden_lines = [line for line in operator.log().splitlines()
                       if "forbidden" in line.lower()]
    reconciles = operator.metric("controller_runtime_reconcile_total") - seen + 1
    denied = [e for e in requests_into(cluster, user, revoked)
              if e["responseStatus"]["code"] == 403]
    assert 1 <= len(denied) <= reconciles + 1, f"{len(denied)} tries in {reconciles} reconciles"
    assert len(events(cluster, src, "cfg", "ReplicationFailed")) == 1, "one Event, counted"
    # One line per denied try, never more: no retry loop behind it. (A fixed bound failed
    # when the window of three reconciles spanned two resyncs: each resync tries once, by
    # design, since a resync is how a restored permission is noticed.)
    assert 1 <= len(forbidden_lines) <= len(denied), (len(denied), forbidden_lines)

    binding.metadata.resource_version = None
    cluster.rbac.create_namespaced_role_binding(revoked, binding)  # the permission returns
    wait_for(lambda: (read(cluster, revoked, "cfg").data or {}) == {"v": "2"},  # type: ignore[union-attr]
             timeout=resync * 5, what="the next resync to repair the namespace")


def test_sigterm_during_a_large_convergence(cluster: Cluster, namespaces: Namespaces,
                                            operators: Operators) -> None:
    src = namespaces()
    label = f"sigterm-{src}"
    targets = [namespaces(labels={"fault": label}) for _ in range(20)]
    for i in range(100):
        cluster.core.create_namespaced_config_map(src, configmap(
            f"big-{i:04d}", {REPLICATE_TO_MATCHING: f"fault={label}"}, data={"i": str(i)}))
    # At 50 writes a second the 1,700 replicas left need 34 s: the SIGTERM lands mid-way.
    first = operators("--kube-api-qps", "50", "--kube-api-burst", "1")
    wait_for(lambda: sum(len(v) for v in replicas_by_namespace(cluster, targets).values())
             >= 300, timeout=60, interval=0.05, what="300 of the 2,000 replicas")
    pending = first.scrape()
    assert pending.value("configmirror_work_pending", state="in_flight") >= 1, \
        "the SIGTERM must land while reconciles are in flight"
    # stop() fails the test if the process is still running 40 s after SIGTERM.
    assert first.stop(timeout=40) == 0, "exit 0 within the Deployment's grace period (40 s)"
    half = sum(len(v) for v in replicas_by_namespace(cluster, targets).values())
    assert half < 2000, "the SIGTERM must land mid-way"
    assert every_replica_equals_its_source(cluster, targets) == [], "a half-written replica"
    operators()
    wait_for(lambda: sum(len(v) for v in replicas_by_namespace(cluster, targets).values())
             == 2000, timeout=120, interval=0.5, what="the new operator to finish the job")
    assert every_replica_equals_its_source(cluster, targets) == []


INVALID = [
    (REPLICATE_TO, "team-["), (REPLICATE_TO, "!"), (REPLICATE_TO, "Upper"),
    (REPLICATE_TO, "a b"), (REPLICATE_TO, "ns-[z-a]"), (REPLICATE_TO, " , "),
    (REPLICATE_TO_MATCHING, "env in (a"), (REPLICATE_TO_MATCHING, "env = = x"),
    (REPLICATE_TO_MATCHING, "-bad=x"), (REPLICATE_TO_MATCHING, "a,"),
    (REPLICATE_TO_MATCHING, "x notin ()"), (REPLICATE_TO_MATCHING, ""),
]


def test_a_thousand_sources_with_random_invalid_annotations(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    rng = random.Random(1000)
    invalid: set[str] = set()
    api = cluster.core

    def annotations_of(name: str) -> dict[str, str]:
        if rng.random() < 0.5:
            key, value = rng.choice(INVALID)
            annotations = {key: value}
            if rng.random() < 0.5:  # a valid half does not save an invalid other half
                other = REPLICATE_TO if key == REPLICATE_TO_MATCHING else REPLICATE_TO_MATCHING
                annotations[other] = a if other == REPLICATE_TO else "env=prod"
            invalid.add(name)
            return annotations
        return {REPLICATE_TO: f"{a},{b}"}

    # Drawn in order (the same thousand every run), created eight at once.
    drawn = [(f"mixed-{i:04d}", annotations_of(f"mixed-{i:04d}")) for i in range(1000)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda item: api.create_namespaced_config_map(
            src, configmap(item[0], item[1])), drawn))
    operator = operators()
    valid = {f"mixed-{i:04d}" for i in range(1000)} - invalid
    wait_for(lambda: all(names == valid for names in replicas_by_namespace(cluster, [a, b])
                         .values()), timeout=120, interval=0.5, what="the valid sources")

    def flagged() -> set[str]:
        found = api.list_namespaced_event(src, field_selector="reason=InvalidSpec").items
        return {e.involved_object.name for e in found}

    wait_for(lambda: flagged() == invalid, timeout=60, interval=0.5,
             what=f"InvalidSpec on each of the {len(invalid)} invalid sources")
    assert healthy(operator) and operator.proc.poll() is None
    assert "Traceback" not in operator.log()
    assert all(read(cluster, a, n) is None for n in sorted(invalid)[:50])

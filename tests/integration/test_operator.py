"""The operator as a process: shutdown, restarts, plan, and no hot loops on 403/Terminating."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from configmirror.replication.spec import REPLICATE_TO, REPLICATE_TO_MATCHING
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import (
    Operators,
    configmap,
    events,
    read,
    requests_into,
    restricted_operator_identity,
)
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane


def writes_by_operator(cluster: Cluster, resource: str = "configmaps",
                       namespaces: list[str] | None = None) -> int:
    """Writes the apiserver audited from configmirror's user agent (into `namespaces`)."""
    return sum(1 for e in cluster.audit()
               if e.get("userAgent", "").startswith("configmirror/")
               and e.get("verb") in ("create", "update", "patch", "delete")
               and (e.get("objectRef") or {}).get("resource") == resource
               and (namespaces is None or (e.get("objectRef") or {}).get("namespace")
                    in namespaces))


def plan(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "configmirror", "plan", "--kubeconfig",
                           str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_restart_with_nothing_changed_makes_zero_writes(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    cluster.require_plane()
    src = namespaces()
    targets = [namespaces() for _ in range(3)]
    for i in range(3):
        cluster.core.create_namespaced_config_map(src, configmap(
            f"cfg-{i}", {REPLICATE_TO: ",".join(targets)}))
    first = operators()
    wait_for(lambda: first.writes() == 9, what="9 replicas written")
    assert first.stop() == 0
    audited = writes_by_operator(cluster)
    second = operators()
    wait_for(lambda: second.metric("controller_runtime_reconcile_total",
                                   controller="configmirror", result="success") >= 3,
             what="the restarted operator to reconcile the 3 sources")
    second.wait_idle()
    assert second.writes() == 0
    assert writes_by_operator(cluster) == audited, "the apiserver saw writes after restart"
    # Its own request metric agrees: it listed ConfigMaps and wrote none.
    requests = "configmirror_api_requests_total"
    assert second.metric(requests, code="200", resource="configmaps", verb="list") >= 1
    assert sum(second.metric(requests, code=str(code), resource="configmaps", verb=verb)
               for verb, code in (("create", 201), ("update", 200), ("delete", 200))) == 0


def test_sigterm_mid_convergence_finishes_in_flight_writes_starts_no_more_and_exits_0(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src = namespaces()
    label = {"configmirror-sigterm": src}
    targets = namespaces.many(150, labels=label)
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO_MATCHING: f"configmirror-sigterm={src}"}))
    # 10 writes a second: 150 replicas take 15 s, so a SIGTERM after the first is mid-way by
    # construction, however fast the machine.
    operator = operators("--kube-api-qps", "10", "--kube-api-burst", "1", wait=False)
    wait_for(lambda: any(read(cluster, ns, "cfg") for ns in targets), timeout=30,
             interval=0.01, what="the convergence to be under way")
    pending = operator.scrape()
    assert pending.value("configmirror_work_pending", state="in_flight") >= 1 and \
        pending.value("configmirror_work_pending", state="queued") >= 1, \
        "the SIGTERM must land while reconciles are in flight and more are queued"
    assert operator.stop(timeout=30) == 0
    present = [ns for ns in targets if read(cluster, ns, "cfg") is not None]
    # Had it started the queued keys, it would have either written all 150 within the drain
    # (25 s; they need 15) or run out of it: both are caught here, however slow the machine.
    assert 0 < len(present) < len(targets), "the SIGTERM must land mid-way"
    log = operator.log()
    assert "draining in-flight work" in log and "did not finish within" not in log
    assert "did not stop within" not in log and "stopped in" in log
    assert writes_by_operator(cluster, namespaces=targets) == len(present), \
        "every write it began, it finished"
    operators()  # the next operator (or leader) finishes the job
    wait_for(lambda: all(read(cluster, ns, "cfg") for ns in targets), timeout=60,
             what="the rest of the replicas")


def test_plan_prints_the_plan_exits_2_then_0_once_synced(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a, untargeted = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    before = plan(cluster, "--namespace", src)
    assert before.returncode == 2, before.stderr
    assert f"create   {a}/cfg  (missing)" in before.stdout
    assert untargeted not in before.stdout, "a namespace the source does not want is not listed"
    as_json = json.loads(plan(cluster, "--namespace", src, "--output", "json").stdout)
    assert as_json["in_sync"] is False
    assert as_json["plans"][0]["targets"] == [a]
    assert as_json["plans"][0]["actions"] == [
        {"action": "create", "namespace": a, "name": "cfg", "why": "missing", "due_in": 0.0}]
    assert read(cluster, a, "cfg") is None, "plan must change nothing"
    operators()
    wait_for(lambda: read(cluster, a, "cfg") is not None, what="the replica")
    after = plan(cluster, "--namespace", src)
    assert after.returncode == 0, after.stdout
    assert f"{src}/cfg: in sync, 1 target namespace(s)" in after.stdout


def test_plan_reports_conflicts_and_invalid_specs(cluster: Cluster,
                                                  namespaces: Namespaces) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(a, configmap("mine"))
    cluster.core.create_namespaced_config_map(src, configmap("mine", {REPLICATE_TO: a}))
    cluster.core.create_namespaced_config_map(src, configmap(
        "broken", {REPLICATE_TO_MATCHING: "env in (x"}))
    out = plan(cluster, "--namespace", src)
    assert out.returncode == 2
    assert f"conflict {a}/mine" in out.stdout
    assert f"{src}/broken: invalid spec:" in out.stdout


def created_at(cluster: Cluster, namespace: str, name: str) -> str:
    return str(cluster.api_client.sanitize_for_serialization(
        cluster.core.read_namespaced_config_map(name, namespace))["metadata"]["creationTimestamp"])


def test_plan_and_run_agree_on_two_sources_of_one_name_the_older_wins(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    # The older source lives in the namespace whose name sorts last: the winner must be
    # chosen by age, not by name (nor by whichever worker gets there first).
    older = namespaces(name=unique_name("zz-older"))
    newer = namespaces(name=unique_name("aa-newer"))
    targets = [namespaces(), namespaces()]
    spec = {REPLICATE_TO: ",".join(targets)}
    cluster.core.create_namespaced_config_map(older, configmap("cfg", spec, data={"v": "old"}))
    first = created_at(cluster, older, "cfg")

    def next_second() -> bool:  # creationTimestamps have a resolution of one second
        probe = unique_name("clock")
        cluster.core.create_namespaced_config_map(newer, configmap(probe))
        return created_at(cluster, newer, probe) > first
    wait_for(next_second, interval=0.2, what="the API server's clock to pass a second")
    cluster.core.create_namespaced_config_map(newer, configmap("cfg", spec, data={"v": "new"}))

    def planned() -> dict[str, dict[str, Any]]:
        out = plan(cluster, "--output", "json")
        assert out.returncode in (0, 2), out.stderr
        return {p["source"]: p for p in json.loads(out.stdout)["plans"]
                if p["source"] in (f"{older}/cfg", f"{newer}/cfg")}

    before = planned()
    assert [(a["action"], a["namespace"]) for a in before[f"{older}/cfg"]["actions"]] == [
        ("create", t) for t in sorted(targets)]
    assert before[f"{newer}/cfg"]["actions"] == []
    assert [(c["namespace"], c["owner"]) for c in before[f"{newer}/cfg"]["conflicts"]] == [
        (t, f"{older}/cfg") for t in sorted(targets)]

    operators()
    wait_for(lambda: all((cm := read(cluster, t, "cfg")) is not None and cm.data == {"v": "old"}
                         for t in targets), what="the older source's replicas")
    wait_for(lambda: len(events(cluster, newer, "cfg", "TargetConflict")) >= 2,
             what="a TargetConflict on the newer source for each target")
    after = planned()
    assert after[f"{older}/cfg"]["actions"] == [] and after[f"{newer}/cfg"]["actions"] == []
    assert [c["namespace"] for c in after[f"{newer}/cfg"]["conflicts"]] == sorted(targets)


def test_source_metrics_count_each_sources_replicas_by_state(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, taken = namespaces(), namespaces()
    targets = [namespaces() for _ in range(3)]
    cluster.core.create_namespaced_config_map(taken, configmap("cfg"))  # not ours: a conflict
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: ",".join([*targets, taken])}))
    operator = operators("--source-metrics")
    wait_for(lambda: all(read(cluster, t, "cfg") for t in targets), what="the replicas")
    operator.wait_idle()
    series = "configmirror_source_replicas"
    key = f"{src}/cfg"
    assert {state: operator.metric(series, kind="ConfigMap", source=key, state=state)
            for state in ("desired", "in_sync", "pending", "conflict")} == {
        "desired": 4, "in_sync": 3, "pending": 0, "conflict": 1}
    assert operator.metric("configmirror_api_server_unavailable") == 0
    assert operator.metric("configmirror_dead_workers") == 0
    assert operator.metric("configmirror_leader") == 1, "no election: it is the one that writes"
    for failures in ("controller_runtime_reconcile_errors_total",
                     "configmirror_reconcile_given_up_total"):
        assert any(s[0] == failures for s in operator.scrape().samples), \
            f"{failures} is there from the start, at 0"
    plain = operators()  # without the flag: no per-source series
    plain.wait_idle()
    assert not [s for s in plain.scrape().samples if s[0] == series]


def test_forbidden_and_terminating_namespaces_cause_no_hot_loop(
        cluster: Cluster, namespaces: Namespaces, operators: Operators, tmp_path: Path) -> None:
    src, allowed, forbidden = namespaces(), namespaces(), namespaces()
    terminating = namespaces()
    namespaces.delete(terminating, finalize=False)  # stays Terminating: no controller-manager
    kubeconfig, user = restricted_operator_identity(cluster, src, [allowed, src], tmp_path)
    operator = operators(kubeconfig=kubeconfig)
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: f"{allowed},{forbidden},{terminating}"}, data={"v": "1"}))
    wait_for(lambda: read(cluster, allowed, "cfg") is not None, what="the allowed replica")
    failed = wait_for(lambda: events(cluster, src, "cfg", "ReplicationFailed"),
                      what="ReplicationFailed")
    assert failed[0].type == "Warning" and forbidden in failed[0].message
    # A second reconcile (an edit) is the clock: each reconcile may try the forbidden
    # namespace once; a hot loop would try it many times in between.
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    wait_for(lambda: (read(cluster, allowed, "cfg").data or {}) == {"v": "2"},  # type: ignore[union-attr]
             what="the edit to reach the allowed namespace")
    operator.wait_idle()
    attempts = requests_into(cluster, user, forbidden)
    assert 1 <= len(attempts) <= 2, f"{len(attempts)} writes tried in the forbidden namespace"
    assert all(e["responseStatus"]["code"] == 403 for e in attempts)
    assert requests_into(cluster, user, terminating) == [], "terminating: no write at all"
    assert len(events(cluster, src, "cfg", "ReplicationFailed")) == 1, "one Event, counted"
    error_lines = [line for line in operator.log().splitlines()
                   if " ERROR " in line or "Traceback" in line]
    assert error_lines == []

"""Who may push where: sources are honoured only in namespaces an admin labelled, and a
replica a namespace owner takes over is theirs from then on."""

from __future__ import annotations

import pytest

from configmirror.replication.model import REPLICA_LABEL
from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import Operator, Operators, configmap, events, read
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane
ALLOWED = {"configmirror.io/source": "true"}
SELECTOR = ("--source-namespace-selector", "configmirror.io/source=true")


def test_a_source_in_an_unlabelled_namespace_is_refused_once_and_writes_nothing(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a = namespaces(), namespaces()
    operator = operators(*SELECTOR, "--resync-period", "1")
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    refused = wait_for(lambda: events(cluster, src, "cfg", "SourceNotAllowed"),
                       what="SourceNotAllowed")
    assert refused[0].type == "Warning"
    assert "--source-namespace-selector=configmirror.io/source=true" in refused[0].message
    # Resyncs plan the source again every second: none may record the Event again.
    seen = operator.metric("configmirror_reconciles_total", role="source")
    wait_for(lambda: operator.metric("configmirror_reconciles_total", role="source")
             >= seen + 3, timeout=20, what="three more plans of the source (resyncs)")
    operator.wait_idle()
    again = events(cluster, src, "cfg", "SourceNotAllowed")
    assert [(e.count or 1) for e in again] == [1], "one Event per change, never a loop"
    assert read(cluster, a, "cfg") is None
    assert operator.writes() == 0


def test_labelling_the_namespace_replicates_and_removing_the_label_removes_the_replicas(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    operators(*SELECTOR)
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"}))
    wait_for(lambda: events(cluster, src, "cfg", "SourceNotAllowed"), what="the refusal")
    cluster.core.patch_namespace(src, {"metadata": {"labels": ALLOWED}})
    for ns in (a, b):
        wait_for(lambda ns=ns: read(cluster, ns, "cfg"), what=f"the replica in {ns}")
    cluster.core.patch_namespace(src, {"metadata": {"labels": {"configmirror.io/source": None}}})
    for ns in (a, b):
        wait_for(lambda ns=ns: read(cluster, ns, "cfg") is None,
                 what=f"the replica in {ns} to be removed")


def test_a_replica_taken_over_by_removing_our_label_is_never_touched_again(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a}, data={"v": "pushed"}))
    wait_for(lambda: read(cluster, a, "cfg"), what="the replica")
    # The namespace's owner takes it over: `kubectl label configmap cfg configmirror.io/replica-`
    cluster.core.patch_namespaced_config_map("cfg", a, {
        "metadata": {"labels": {REPLICA_LABEL: None}}, "data": {"v": "mine"}})
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "pushed again"}})
    conflict = wait_for(lambda: events(cluster, src, "cfg", "TargetConflict"),
                        what="TargetConflict on the source")
    assert "not a replica" in conflict[0].message
    operator.wait_idle()
    taken = read(cluster, a, "cfg")
    assert taken is not None and taken.data == {"v": "mine"}, "an owner's object is theirs"
    cluster.core.delete_namespaced_config_map("cfg", src)
    wait_for(lambda: operator.metric("configmirror_reconciles_total", role="source") >= 3,
             what="the deleted source to be planned")
    operator.wait_idle()
    kept = read(cluster, a, "cfg")
    assert kept is not None and kept.data == {"v": "mine"}, "not deleted with the source"

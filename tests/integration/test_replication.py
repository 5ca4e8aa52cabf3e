"""docs/concepts.md, end to end: the operator (`configmirror run`) against a real apiserver.

One test per behaviour rule, plus the cases users hit. Tests wait for conditions with a
deadline; "nothing happens" is checked after a positive signal that the operator has looked
(an Event, or a replica in another namespace written by the same reconcile).

Every test runs once per operator flavour (the `flavour` fixture, tests/fixtures.py), on the
flavour's cluster: a local process as the cluster's admin, and one with only deploy/'s
ServiceAccount token, which proves deploy/'s RBAC is enough for all of it; `make kind-test` runs
them against the operator deploy/ installs; the node tier (`make cluster-test`) against deploy/,
the chart and the release's two installs on a kind node. Against a deployed operator the tests
that need a local process are deselected, and against some the tests that wait out its grace
(configmirror_testing.e2e.DEPLOYED_FLAVOURS).
"""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from configmirror.replication.model import CONTENT_HASH, MANAGED_BY, REPLICA_LABEL, REPLICA_OF
from configmirror.replication.spec import REPLICATE_TO, REPLICATE_TO_MATCHING
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import (
    Flavour,
    Operator,
    Operators,
    configmap,
    events,
    read,
    wait_replica,
)
from configmirror_testing.wait import wait_for

# Once per operator flavour (tests/fixtures.py): each test is reported as test_x[flavour].
pytestmark = [pytest.mark.controlplane, pytest.mark.usefixtures("flavour")]


@pytest.fixture
def cluster(flavour: Flavour) -> Cluster:
    """The cluster of the test's operator flavour."""
    return flavour.cluster


@pytest.fixture
def removal_timeout(flavour: Flavour) -> float:
    """How long a removal may take against the test's operator flavour."""
    return flavour.removal_timeout


def wait_gone(cluster: Cluster, namespace: str, timeout: float, name: str = "cfg") -> None:
    wait_for(lambda: read(cluster, namespace, name) is None, timeout=timeout,
             what=f"{namespace}/{name} to be deleted")


def wait_event(cluster: Cluster, namespace: str, reason: str, name: str = "cfg",
               timeout: float = 10) -> list[client.CoreV1Event]:
    return wait_for(lambda: events(cluster, namespace, name, reason), timeout=timeout,
                    what=f"Event {reason} on {namespace}/{name}")


# -- rule 1: every target namespace holds a replica ---------------------------------------


def test_replicates_into_named_namespaces_with_source_content(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: f"{a}, {b}", "team": "platform",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"},
        data={"ca.crt": "PEM"}, labels={"app": "web"}))
    for ns in (a, b):
        replica = wait_replica(cluster, ns, {"ca.crt": "PEM"})
        meta = replica.metadata
        assert meta.labels[REPLICA_LABEL] == "true"
        assert meta.labels["app.kubernetes.io/managed-by"] == "configmirror"
        assert meta.labels["app"] == "web"
        assert meta.annotations[REPLICA_OF] == f"{src}/cfg"
        assert meta.annotations["team"] == "platform"
        assert CONTENT_HASH in meta.annotations
        assert REPLICATE_TO not in meta.annotations
        assert "kubectl.kubernetes.io/last-applied-configuration" not in meta.annotations


def test_globs_excludes_and_selector_union(cluster: Cluster, namespaces: Namespaces,
                                           operator: Operator) -> None:
    src = namespaces()
    tag = src.rsplit("-", 1)[-1]
    team_a = namespaces(name=f"team-a-{tag}")
    team_legacy = namespaces(name=f"team-legacy-{tag}")
    prod = namespaces(labels={"env": "prod", "tier": "web"})
    dev = namespaces(labels={"env": "dev", "tier": "web"})
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {
        REPLICATE_TO: f"team-*-{tag}, !team-legacy-*",
        REPLICATE_TO_MATCHING: "env=prod,tier in (web,api)"}))
    wait_replica(cluster, team_a)
    wait_replica(cluster, prod)
    wait_event(cluster, src, "Replicated")
    assert read(cluster, team_legacy, "cfg") is None
    assert read(cluster, dev, "cfg") is None


@pytest.mark.grace
def test_star_honours_default_exclusions_and_never_copies_into_its_own_namespace(
        cluster: Cluster, namespaces: Namespaces, operator: Operator,
        removal_timeout: float) -> None:
    src, other = namespaces(), namespaces()
    ignored = namespaces(labels={"configmirror.io/ignore": "true"})
    cluster.core.create_namespaced_config_map(src, configmap("star-cfg", {REPLICATE_TO: "*"}))
    try:
        wait_replica(cluster, other, name="star-cfg")
        wait_replica(cluster, "default", name="star-cfg")
        for excluded in ("kube-system", "kube-public", "kube-node-lease", ignored):
            assert read(cluster, excluded, "star-cfg") is None
        source = read(cluster, src, "star-cfg")
        assert source is not None and REPLICA_OF not in (source.metadata.annotations or {})
    finally:
        cluster.core.delete_namespaced_config_map("star-cfg", src)
        wait_gone(cluster, "default", removal_timeout, "star-cfg")


# -- rule 2: edits propagate; an unchanged source costs no write ---------------------------


@pytest.mark.operator_process
def test_source_edit_updates_every_replica_and_unchanged_source_writes_nothing(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"},
                                                             data={"v": "1"}))
    wait_replica(cluster, a, {"v": "1"})
    wait_replica(cluster, b, {"v": "1"})
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    wait_replica(cluster, a, {"v": "2"})
    wait_replica(cluster, b, {"v": "2"})
    wait_for(lambda: operator.writes() == 4, what="4 writes (2 creates, 2 updates)")
    # A change that does not reach replicas (a configmirror annotation of our own) must
    # cost no replica write; the reconcile it triggers is seen through the queue metric.
    adds = operator.metric("workqueue_adds_total")
    cluster.core.patch_namespaced_config_map(
        "cfg", src, {"metadata": {"annotations": {"configmirror.io/note": "x"}}})
    wait_for(lambda: operator.metric("workqueue_adds_total") > adds, what="the reconcile")
    operator.wait_idle()
    assert operator.writes() == 4


# -- rule 3: new and relabelled namespaces -------------------------------------------------


def test_namespace_created_after_the_source_gets_its_replica_from_its_event(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src = namespaces()
    tag = src.rsplit("-", 1)[-1]
    early = namespaces(name=f"late-a-{tag}")
    cluster.core.create_namespaced_config_map(src, configmap("cfg",
                                                             {REPLICATE_TO: f"late-*-{tag}"}))
    wait_replica(cluster, early)  # the source has been planned: the namespace comes after
    late = namespaces(name=f"late-x-{tag}")
    # The resync is 10 minutes away: only the namespace's own event can bring it this soon.
    wait_replica(cluster, late, timeout=30)


@pytest.mark.grace
def test_selector_follows_namespace_labels_that_change_after_the_source(
        cluster: Cluster, namespaces: Namespaces, operator: Operator,
        removal_timeout: float) -> None:
    src, target = namespaces(), namespaces(labels={"env": "dev"})
    marker = namespaces(labels={"configmirror-test": src})
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO_MATCHING: f"configmirror-test in ({src},{target})"}))
    wait_replica(cluster, marker)
    assert read(cluster, target, "cfg") is None
    cluster.core.patch_namespace(target, {"metadata": {"labels": {"configmirror-test": target}}})
    wait_replica(cluster, target)
    # rule 4: it stops matching, it loses its replica.
    cluster.core.patch_namespace(target, {"metadata": {"labels": {"configmirror-test": None}}})
    wait_gone(cluster, target, removal_timeout)
    assert read(cluster, marker, "cfg") is not None


# -- rule 4: fewer targets, deleted sources ------------------------------------------------


@pytest.mark.grace
def test_namespace_removed_from_the_list_loses_its_replica(
        cluster: Cluster, namespaces: Namespaces, operator: Operator,
        removal_timeout: float) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"}))
    wait_replica(cluster, b)
    cluster.core.patch_namespaced_config_map("cfg", src,
                                             {"metadata": {"annotations": {REPLICATE_TO: a}}})
    wait_gone(cluster, b, removal_timeout)
    assert read(cluster, a, "cfg") is not None


@pytest.mark.grace
def test_deleted_source_loses_all_replicas(cluster: Cluster, namespaces: Namespaces,
                                           operator: Operator, removal_timeout: float) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"}))
    wait_replica(cluster, a)
    wait_replica(cluster, b)
    cluster.core.delete_namespaced_config_map("cfg", src)
    wait_gone(cluster, a, removal_timeout)
    wait_gone(cluster, b, removal_timeout)


@pytest.mark.grace
def test_source_losing_both_annotations_loses_all_replicas(
        cluster: Cluster, namespaces: Namespaces, operator: Operator,
        removal_timeout: float) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a, REPLICATE_TO_MATCHING: "nothing-has-this"}))
    wait_replica(cluster, a)
    cluster.core.patch_namespaced_config_map("cfg", src, {"metadata": {"annotations": {
        REPLICATE_TO: None, REPLICATE_TO_MATCHING: None}}})
    wait_gone(cluster, a, removal_timeout)
    assert read(cluster, src, "cfg") is not None, "the source itself stays"


# -- rule 5: drift repair -------------------------------------------------------------------


def test_hand_edited_replica_is_restored(cluster: Cluster, namespaces: Namespaces,
                                         operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a},
                                                             data={"v": "1"}))
    wait_replica(cluster, a, {"v": "1"})
    cluster.core.patch_namespaced_config_map("cfg", a, {"data": {"v": "hand-edited"}})
    wait_replica(cluster, a, {"v": "1"})
    cluster.core.patch_namespaced_config_map("cfg", a, {"metadata": {"labels": {
        MANAGED_BY: "someone"}}})
    wait_for(lambda: (read(cluster, a, "cfg").metadata.labels or {}).get(  # type: ignore[union-attr]
        MANAGED_BY) == "configmirror", what="a label configmirror writes to be restored")


@pytest.mark.operator_process  # its writes and reconciles, from the process's /metrics
def test_a_label_configmirror_does_not_write_is_not_drift(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a},
                                                             data={"v": "1"}))
    wait_replica(cluster, a, {"v": "1"})
    operator.wait_idle()
    written = operator.writes()
    looked = operator.metric("configmirror_reconciles_total", role="target")
    cluster.core.patch_namespaced_config_map("cfg", a, {"metadata": {"labels": {"x": "y"}}})
    wait_for(lambda: operator.metric("configmirror_reconciles_total", role="target") > looked,
             what="the operator to look at the edited replica")
    operator.wait_idle()
    assert operator.writes() == written, "not a field of ours: left as it is (as a policy's)"
    assert (read(cluster, a, "cfg").metadata.labels or {}).get("x") == "y"  # type: ignore[union-attr]


@pytest.mark.parametrize("edit", [None, "0" * 32], ids=["removed", "changed"])
def test_a_replica_whose_content_hash_mark_was_edited_is_restored(
        cluster: Cluster, namespaces: Namespaces, operator: Operator, edit: str | None) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    written = wait_replica(cluster, a).metadata.annotations[CONTENT_HASH]
    cluster.core.patch_namespaced_config_map("cfg", a, {"metadata": {"annotations": {
        CONTENT_HASH: edit}}})
    wait_for(lambda: (read(cluster, a, "cfg").metadata.annotations or {})  # type: ignore[union-attr]
             .get(CONTENT_HASH) == written, what="the content-hash mark to be written back")


def test_deleted_replica_is_recreated(cluster: Cluster, namespaces: Namespaces,
                                      operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    first = wait_replica(cluster, a)
    cluster.core.delete_namespaced_config_map("cfg", a)
    wait_for(lambda: (cm := read(cluster, a, "cfg")) is not None
             and cm.metadata.uid != first.metadata.uid, what="a new replica")


# -- rule 6: foreign objects are never touched ----------------------------------------------


def test_foreign_configmap_is_untouched_conflicts_and_is_replaced_once_deleted(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    foreign = cluster.core.create_namespaced_config_map(a, configmap(
        "cfg", {"owner": "someone else"}, data={"theirs": "keep me"}))
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"}))
    wait_replica(cluster, b)
    conflict = wait_event(cluster, src, "TargetConflict")
    assert conflict[0].type == "Warning" and a in conflict[0].message
    after = read(cluster, a, "cfg")
    assert after is not None
    assert after.metadata.resource_version == foreign.metadata.resource_version
    assert after.data == {"theirs": "keep me"}
    cluster.core.delete_namespaced_config_map("cfg", a)
    wait_replica(cluster, a, {"greeting": "hello"})


# -- rule 7: immutable ------------------------------------------------------------------------


def test_immutable_source_replicas_are_recreated_on_change(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a}, data={"v": "1"}, immutable=True))
    first = wait_replica(cluster, a, {"v": "1"})
    assert first.immutable is True
    # An immutable source cannot change in place: users replace it.
    cluster.core.delete_namespaced_config_map("cfg", src)
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a}, data={"v": "2"}, immutable=True))
    second = wait_replica(cluster, a, {"v": "2"})
    assert second.immutable is True and second.metadata.uid != first.metadata.uid


def test_mutable_source_made_immutable_recreates_an_immutable_replica(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a},
                                                             data={"v": "1"}))
    wait_replica(cluster, a, {"v": "1"})
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}, "immutable": True})
    wait_for(lambda: (cm := read(cluster, a, "cfg")) is not None and cm.immutable is True
             and cm.data == {"v": "2"}, what="an immutable replica with v=2")


# -- rule 8: two sources, one name ------------------------------------------------------------


@pytest.mark.grace
def test_two_sources_with_one_name_first_replica_wins(
        cluster: Cluster, namespaces: Namespaces, operator: Operator,
        removal_timeout: float) -> None:
    one, two, target = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(one, configmap("cfg", {REPLICATE_TO: target},
                                                             data={"from": "one"}))
    wait_replica(cluster, target, {"from": "one"})
    cluster.core.create_namespaced_config_map(two, configmap("cfg", {REPLICATE_TO: target},
                                                             data={"from": "two"}))
    wait_event(cluster, two, "TargetConflict")
    replica = read(cluster, target, "cfg")
    assert replica is not None and replica.data == {"from": "one"}
    assert replica.metadata.annotations[REPLICA_OF] == f"{one}/cfg"
    # When the winner goes, its replica goes, and the other source takes the namespace.
    cluster.core.delete_namespaced_config_map("cfg", one)
    wait_replica(cluster, target, {"from": "two"}, timeout=removal_timeout)


# -- rule 9: orphans, also at start-up -------------------------------------------------------


@pytest.mark.operator_process
def test_source_deleted_while_the_operator_is_down_loses_its_replicas_on_start(
        cluster: Cluster, namespaces: Namespaces, operators: Operators,
        removal_timeout: float) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    first = operators()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"}))
    wait_replica(cluster, a)
    wait_replica(cluster, b)
    assert first.stop() == 0
    cluster.core.delete_namespaced_config_map("cfg", src)
    operators()
    wait_gone(cluster, a, removal_timeout)
    wait_gone(cluster, b, removal_timeout)


# -- rule 11: Events ---------------------------------------------------------------------------


@pytest.mark.operator_process
def test_replicated_event_counts_changes_and_no_change_records_nothing(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    operator = operators()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"}))
    replicated = wait_event(cluster, src, "Replicated")
    assert replicated[0].type == "Normal"
    assert replicated[0].message == "created 2, updated 0, deleted 0 replicas"
    assert operator.stop() == 0
    restarted = operators()  # reconciles the source again: in sync, so nothing is recorded
    wait_for(lambda: restarted.metric("controller_runtime_reconcile_total",
                                      controller="configmirror", result="success") >= 1,
             what="a reconcile after the restart")
    assert [e.message for e in events(cluster, src, "cfg", "Replicated")] == [
        "created 2, updated 0, deleted 0 replicas"]


# -- content edge cases -------------------------------------------------------------------------


def test_binary_data_and_a_configmap_near_the_1mib_limit(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    blob = bytes(range(256)) * 4  # not UTF-8
    big = "x" * (1024 * 1024 - 64 * 1024)  # ~960 KiB of data in one key
    cluster.core.create_namespaced_config_map(src, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cfg", annotations={REPLICATE_TO: a}),
        data={"big": big}, binaryData={"blob": base64.b64encode(blob).decode()}))
    replica = wait_replica(cluster, a, timeout=20)
    assert replica.data == {"big": big}
    assert base64.b64decode(replica.binary_data["blob"]) == blob


# -- invalid specs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("annotation", "value", "names"), [
    (REPLICATE_TO, "team-[", "team-["),
    (REPLICATE_TO_MATCHING, "env in (prod", "at the end"),
])
def test_invalid_spec_records_invalid_spec_and_deletes_nothing(
        cluster: Cluster, namespaces: Namespaces, operator: Operator, annotation: str,
        value: str, names: str) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    wait_replica(cluster, a)
    cluster.core.patch_namespaced_config_map("cfg", src, {"metadata": {"annotations": {
        REPLICATE_TO: None, annotation: value}}})
    warning = wait_event(cluster, src, "InvalidSpec")[0]
    assert warning.type == "Warning" and annotation in warning.message and names in warning.message
    assert read(cluster, a, "cfg") is not None, "a typo must never delete replicas"
    # The next edit is picked up at once.
    cluster.core.patch_namespaced_config_map("cfg", src, {"metadata": {"annotations": {
        annotation: None, REPLICATE_TO: a}}, "data": {"fixed": "yes"}})
    wait_replica(cluster, a, {"greeting": "hello", "fixed": "yes"})


# -- dry run and plan ---------------------------------------------------------------------------


@pytest.mark.operator_process
def test_dry_run_writes_nothing(cluster: Cluster, namespaces: Namespaces,
                                operators: Operators) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    operator = operators("--dry-run")
    wait_for(lambda: f"would create replica {a}/cfg of {src}/cfg" in operator.log(),
             what="the dry-run decision in the log")
    assert read(cluster, a, "cfg") is None
    assert operator.writes() == 0
    assert events(cluster, src, "cfg") == []

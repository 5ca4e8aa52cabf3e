"""Replicas that GitOps tools leave alone: no tracking metadata copied, sources choose the rest."""

from __future__ import annotations

import pytest

from configmirror.replication.model import REPLICA_LABEL, REPLICA_OF
from configmirror.replication.spec import COPY_ANNOTATIONS, COPY_LABELS, REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import (
    Operator,
    Operators,
    configmap,
    events,
    read,
    restart_writes_nothing,
)
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane

TRACKING_LABELS = {
    "app.kubernetes.io/instance": "guestbook",           # Argo CD's default tracking label
    "app.kubernetes.io/managed-by": "Helm",
    "kustomize.toolkit.fluxcd.io/name": "infra",         # Flux's labels
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    "helm.toolkit.fluxcd.io/name": "platform",
}
TRACKING_ANNOTATIONS = {
    "argocd.argoproj.io/tracking-id": "guestbook:/ConfigMap:platform/cfg",
    "meta.helm.sh/release-name": "platform",             # Helm's ownership annotations
    "meta.helm.sh/release-namespace": "platform",
    "kubectl.kubernetes.io/last-applied-configuration": "{}",
}


def metadata(cluster: Cluster, namespace: str) -> tuple[dict[str, str], dict[str, str]]:
    cm = read(cluster, namespace, "cfg")
    assert cm is not None
    return dict(cm.metadata.labels or {}), dict(cm.metadata.annotations or {})


def test_a_source_managed_by_argo_cd_flux_and_helm_gives_replicas_none_of_their_marks(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a, "team.example.com/owner": "platform", **TRACKING_ANNOTATIONS},
        labels={"tier": "shared", **TRACKING_LABELS}))
    wait_for(lambda: read(cluster, a, "cfg"), what="the replica")
    labels, annotations = metadata(cluster, a)
    assert labels == {"tier": "shared", REPLICA_LABEL: "true",
                      "app.kubernetes.io/managed-by": "configmirror"}
    assert set(annotations) == {"team.example.com/owner", REPLICA_OF,
                                "configmirror.io/content-hash"}


def test_copy_labels_and_copy_annotations_choose_and_a_change_updates_replicas(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a, COPY_LABELS: "team,tier",
                COPY_ANNOTATIONS: "*,!internal.example.com/*",
                "internal.example.com/cost-center": "42", "docs.example.com/url": "u"},
        labels={"team": "a", "tier": "web", "env": "prod"}))
    wait_for(lambda: read(cluster, a, "cfg"), what="the replica")
    labels, annotations = metadata(cluster, a)
    assert {k for k in labels if "configmirror" not in k and "managed-by" not in k} == {
        "team", "tier"}
    assert "internal.example.com/cost-center" not in annotations
    assert annotations["docs.example.com/url"] == "u"

    cluster.core.patch_namespaced_config_map("cfg", src, {"metadata": {"annotations": {
        COPY_LABELS: "team,tier,env", COPY_ANNOTATIONS: "*"}}})
    wait_for(lambda: metadata(cluster, a)[0].get("env") == "prod" and
             "internal.example.com/cost-center" in metadata(cluster, a)[1],
             what="the replica to carry what the source now copies")


def test_a_bad_copy_pattern_is_invalid_spec_and_changes_nothing(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a}, data={"v": "1"}, labels={"team": "a"}))
    wait_for(lambda: read(cluster, a, "cfg"), what="the replica")
    before = read(cluster, a, "cfg")
    assert before is not None
    cluster.core.patch_namespaced_config_map("cfg", src, {
        "metadata": {"annotations": {COPY_LABELS: "team=a"}}, "data": {"v": "2"}})
    invalid = wait_for(lambda: events(cluster, src, "cfg", "InvalidSpec"), what="InvalidSpec")
    assert COPY_LABELS in invalid[0].message and "team=a" in invalid[0].message
    operator.wait_idle()
    after = read(cluster, a, "cfg")
    assert after is not None
    assert after.metadata.resource_version == before.metadata.resource_version, \
        "a typo changes nothing"


def test_restart_with_copy_patterns_and_drops_writes_nothing(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a, COPY_LABELS: "team", **TRACKING_ANNOTATIONS},
        labels={"team": "a", **TRACKING_LABELS}))
    first = operators()
    wait_for(lambda: read(cluster, a, "cfg"), what="the replica")
    restart_writes_nothing(first, operators)

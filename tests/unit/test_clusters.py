"""Member clusters as the domain reads them: a cluster Secret parsed (each fault named), the
inventory (two Secrets of one name refuse both), which clusters a source reaches, and a
source's replicas as written in a member."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from configmirror.client.store import Store
from configmirror.replication.clusters import (
    CLUSTER_LABEL,
    InvalidCluster,
    MemberCaches,
    for_cluster,
    inventory,
    member_of,
)
from configmirror.replication.model import (
    CONTENT_HASH,
    CachedObject,
    Caches,
    content_hash,
    object_indexers,
)
from configmirror.replication.spec import (
    REPLICATE_TO_CLUSTERS,
    REPLICATE_TO_CLUSTERS_MATCHING,
    SOURCE_CLUSTER,
    InvalidSpec,
    Scope,
    parse_spec,
)
from configmirror.vocabulary import CONFIGMAP
from configmirror_testing.builders import KEY, ns, plan, source, world

KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "b",
    "clusters": [{"name": "b", "cluster": {"server": "https://10.0.0.2:6443"}}],
    "users": [{"name": "b", "user": {"token": "t0ken"}}],
    "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}]}


def secret(labels: dict[str, str] | None = None, data: dict[str, Any] | None = None,
           name: str = "cluster-b") -> dict[str, Any]:
    text = yaml.safe_dump(KUBECONFIG)
    return {"metadata": {"name": name, "namespace": "configmirror", "uid": "u", "resourceVersion":
                         "7", "labels": {CLUSTER_LABEL: "b", **(labels or {})}},
            "data": data if data is not None else {
                "kubeconfig": base64.b64encode(text.encode()).decode()}}


def b64(doc: Any) -> str:
    return base64.b64encode((doc if isinstance(doc, str) else yaml.safe_dump(doc)).encode()
                            ).decode()


def test_a_cluster_secret_is_its_name_its_other_labels_and_its_kubeconfig() -> None:
    member = member_of(secret({"region": "eu"}), "local")
    assert (member.name, dict(member.labels), member.secret, member.key) == (
        "b", {"region": "eu"}, "cluster-b", "kubeconfig")
    assert yaml.safe_load(member.kubeconfig) == KUBECONFIG
    assert "t0ken" not in repr(member), "a credential never reaches a log line"


def test_cluster_api_writes_its_kubeconfig_under_value() -> None:
    assert member_of(secret(data={"value": b64(KUBECONFIG)}), "local").key == "value"


@pytest.mark.parametrize(("labels", "data", "fault"), [
    ({CLUSTER_LABEL: "B_1"}, None, "'B_1' is not a cluster name"),
    ({CLUSTER_LABEL: "local"}, None, "cluster local is the home cluster's own name"),
    ({}, {}, "has no kubeconfig under kubeconfig or value"),
    ({}, {"kubeconfig": "%%%"}, "kubeconfig is not base64"),
    ({}, {"kubeconfig": b64("a: [")}, "kubeconfig: not YAML"),
    ({}, {"kubeconfig": b64("just text")}, "not a kubeconfig"),
    ({}, {"kubeconfig": b64({**KUBECONFIG, "contexts": []})}, "holds 0 contexts"),
    ({}, {"kubeconfig": b64({**KUBECONFIG, "contexts": KUBECONFIG["contexts"] * 2})},
     "holds 2 contexts"),
    ({}, {"kubeconfig": b64({**KUBECONFIG, "users": []})}, "names user 'b', which it does not"),
    ({}, {"kubeconfig": b64({**KUBECONFIG, "users": [{"name": "c", "user": {"token": "t"}}]})},
     "names user 'b', which it does not"),
    ({}, {"kubeconfig": b64({**KUBECONFIG, "users": ["b"]})}, "names user 'b', which it does not"),
    ({}, {"kubeconfig": b64({**KUBECONFIG, "clusters": [{"name": "c", "cluster": {}}]})},
     "names cluster 'b', which it does not"),
])
def test_a_secret_that_cannot_be_used_is_refused_naming_the_fault(
        labels: dict[str, str], data: dict[str, Any] | None, fault: str) -> None:
    with pytest.raises(InvalidCluster) as raised:
        member_of(secret(labels, data), "local")
    assert fault in str(raised.value)


def test_a_kubeconfig_that_is_no_yaml_is_named_by_the_parsers_first_line_only() -> None:
    # The lines after it quote the text, which holds a credential.
    text = yaml.safe_dump(KUBECONFIG).replace("token: t0ken", "token: t0ken: more")
    with pytest.raises(InvalidCluster) as raised:
        member_of(secret(data={"kubeconfig": b64(text)}), "local")
    assert str(raised.value) == (
        "cluster b: kubeconfig: not YAML: mapping values are not allowed here")


def test_a_kubeconfig_skips_entries_that_are_no_mapping() -> None:
    doc = {**KUBECONFIG, "users": ["b", *KUBECONFIG["users"]],
           "clusters": [None, *KUBECONFIG["clusters"]]}
    assert member_of(secret(data={"kubeconfig": b64(doc)}), "local").name == "b"


def test_an_inventory_of_usable_secrets_has_no_fault() -> None:
    other = secret(name="cluster-c")
    other["metadata"]["labels"][CLUSTER_LABEL] = "c"
    members, faults = inventory([secret(), other], "local")
    assert (sorted(members), faults) == (["b", "c"], {})


def test_two_secrets_naming_one_cluster_are_both_refused_and_others_kept() -> None:
    other = secret(name="cluster-c")
    other["metadata"]["labels"][CLUSTER_LABEL] = "c"
    members, faults = inventory([secret(), secret(name="cluster-b2"), other,
                                 secret(data={}, name="broken")], "local")
    assert list(members) == ["c"]
    assert faults["cluster-b"] == faults["cluster-b2"] == (
        "cluster b is named by more than one Secret (cluster-b, cluster-b2); none of them is "
        "used")
    assert "no kubeconfig" in faults["broken"]


@pytest.mark.parametrize(("to", "matching", "reached"), [
    (None, None, {"local"}),                       # neither: the home cluster only
    ("*", None, {"local", "b", "c"}),
    ("b", None, {"b"}),                            # not home unless named
    ("*,!b", None, {"local", "c"}),
    (None, "region=eu", {"b"}),
    ("c", "region in (eu)", {"b", "c"}),           # the union
    ("local,c", None, {"local", "c"}),
])
def test_a_source_reaches_the_clusters_its_annotations_pick(
        to: str | None, matching: str | None, reached: set[str]) -> None:
    spec = parse_spec("*", None, to_clusters=to, to_clusters_matching=matching)
    clusters = {"local": ({}, True), "b": ({"region": "eu"}, False), "c": ({}, False)}
    assert {name for name, (labels, home) in clusters.items()
            if spec.reaches(name, labels, home)} == reached


@pytest.mark.parametrize(("annotation", "value"), [
    (REPLICATE_TO_CLUSTERS, "b,["), (REPLICATE_TO_CLUSTERS, "B"),
    (REPLICATE_TO_CLUSTERS_MATCHING, "region in (eu")])
def test_a_cluster_annotation_that_does_not_parse_names_itself(annotation: str,
                                                               value: str) -> None:
    kwargs = {"to_clusters" if annotation == REPLICATE_TO_CLUSTERS
              else "to_clusters_matching": value}
    with pytest.raises(InvalidSpec, match=annotation):
        parse_spec("*", None, **kwargs)


def test_a_replica_in_a_member_carries_the_home_clusters_name_in_its_digest() -> None:
    compiled = source({"configmirror.io/replicate-to": "*"}).compiled
    assert compiled is not None
    member = for_cluster(compiled, "local")
    assert member.annotations[SOURCE_CLUSTER] == "local"
    assert member.content_hash != compiled.content_hash
    assert member.annotations[CONTENT_HASH] == member.content_hash == content_hash(
        member.payload, member.labels,
        {k: v for k, v in member.annotations.items() if k != CONTENT_HASH})
    assert (member.payload, member.labels) == (compiled.payload, compiled.labels)


def test_in_a_member_the_sources_own_namespace_is_a_target_and_the_member_sides_is_not() -> None:
    home = Scope.from_flags("*", "", cluster="local", operator_namespace="configmirror")
    member = home.for_cluster("b", {}, "configmirror")
    spaces = [ns("src"), ns("a"), ns("configmirror")]
    src = source({"configmirror.io/replicate-to": "*",
                  REPLICATE_TO_CLUSTERS: "*"}, namespace="src")
    assert plan(src, spaces, scope=home).targets == ("a",)
    assert plan(src, spaces, scope=member).targets == ("a", "src")


def member_caches(src: CachedObject) -> tuple[MemberCaches, Store[CachedObject]]:
    """A member's caches, with nothing there yet, over the home cluster's holding `src`; and
    the home's store of objects."""
    objects: Store[CachedObject] = Store(object_indexers())
    objects.upsert(src.key, src)
    home = Caches(objects, world([], [ns("src")]).namespaces, CONFIGMAP)
    there = world([], [ns("a")])
    return MemberCaches(home, there.objects, there.namespaces, "local"), objects


def test_a_member_makes_each_sources_member_form_once_per_version() -> None:
    annotations = {"configmirror.io/replicate-to": "*", REPLICATE_TO_CLUSTERS: "*"}
    caches, home = member_caches(source(annotations))
    first = caches.source(KEY)
    assert first is not None and first.compiled is not None
    assert first.compiled.annotations[SOURCE_CLUSTER] == "local"
    # The same version of the source: the same member form, however it is read.
    assert caches.source(KEY) is first
    assert [s is first for s in caches.sources()] == [True]
    assert [s is first for s in caches.sources_named("cfg")] == [True]
    # A new version: a new member form, of the new content.
    newer = source(annotations, data={"k": "w"}, rv="11")
    home.upsert(KEY, newer)
    second = caches.source(KEY)
    assert second is not None and second.compiled is not None and newer.compiled is not None
    assert second is not first
    assert second.compiled.payload == newer.compiled.payload != first.compiled.payload
    assert caches.source(KEY) is second


def test_a_member_forgets_a_deleted_sources_member_form() -> None:
    caches, home = member_caches(source())
    assert caches.source(KEY) is not None
    home.delete(KEY)
    assert caches.source(KEY) is None
    assert caches._made == {}  # only memory: a new version is made anew anyway

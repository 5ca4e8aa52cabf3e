"""Kinds turned on by --kinds (vocabulary.OPTIONAL): one table row each, the same pipeline.
A replica copies the kind's fields as the source holds them and is written at the kind's
own API group; what only a ConfigMap or a Secret has (data keys, a type) is refused on
another kind. The informers and RBAC are tested against the real API server
(tests/integration/test_kinds.py)."""

from __future__ import annotations

from typing import Any

import pytest

from configmirror.operator.caches import replicated_kinds
from configmirror.operator.settings import Settings
from configmirror.replication.model import CONTENT_HASH, object_from_json, replica_hash
from configmirror.replication.plan import Grace, decide, desired_body, unserved_pulls
from configmirror.replication.spec import (
    COPY_KEYS,
    DEFAULT_DROP,
    REPLICA_TYPE,
    REPLICATE_TO,
    InvalidSpec,
    ReplicaRules,
    parse_pulls,
)
from configmirror.vocabulary import (
    CONFIGMAP,
    LIMITRANGE,
    NETWORKPOLICY,
    OPTIONAL,
    RESOURCEQUOTA,
    ROLEBINDING,
    SERVICEACCOUNT,
    Kind,
)
from configmirror_testing.builders import SCOPE, cached, ns, world
from configmirror_testing.objects import KIND_CONTENTS, of_kind

KINDS = sorted(OPTIONAL)
AT_ONCE = Grace.from_now(0.0)


BINDING_VIEW = ReplicaRules.from_flags(DEFAULT_DROP, DEFAULT_DROP, "view, edit")


def compiled(kind: Kind, body: dict[str, Any]) -> Any:
    """As the operator's cache holds it (rules: the default drop list, view and edit
    bindable)."""
    return object_from_json(body, BINDING_VIEW, kind)


def raw(kind: Kind, namespace: str, fields: dict[str, Any],
        annotations: dict[str, str] | None = None, rv: str = "10") -> dict[str, Any]:
    body = of_kind(kind, "default-deny", fields, annotations, namespace=namespace)
    body["metadata"].update(uid=f"u-{namespace}", resourceVersion=rv,
                            creationTimestamp="2026-01-01T00:00:00Z")
    return body


def test_resources_of_a_group_have_its_paths_and_api_version() -> None:
    resource = NETWORKPOLICY.resource
    assert resource.api_version == "networking.k8s.io/v1"
    assert resource.collection() == "/apis/networking.k8s.io/v1/networkpolicies"
    assert resource.item("a", "b") == "/apis/networking.k8s.io/v1/namespaces/a/networkpolicies/b"
    assert LIMITRANGE.resource.collection("a") == "/api/v1/namespaces/a/limitranges"
    assert CONFIGMAP.resource.api_version == "v1"


def test_kinds_are_turned_on_by_name_each_once_and_configmaps_always() -> None:
    kinds = replicated_kinds(Settings(kinds="NetworkPolicy, resourcequota,networkpolicy,"))
    assert [k.kind for k in kinds] == [CONFIGMAP, NETWORKPOLICY, RESOURCEQUOTA]
    assert all(k.names == () for k in kinds)  # every object of the kind is watched
    assert [k.kind for k in replicated_kinds(Settings())] == [CONFIGMAP]


@pytest.mark.parametrize(("kinds", "message"), [
    ("pod", "--kinds: 'pod' is not a kind configmirror replicates (configmap, "),
    ("secret", "Secrets are turned on by name, with --secret-names"),
])
def test_an_unknown_kind_is_refused_naming_the_flag(kinds: str, message: str) -> None:
    with pytest.raises(InvalidSpec, match=r"^--kinds") as raised:
        replicated_kinds(Settings(kinds=kinds))
    assert message in str(raised.value)


@pytest.mark.parametrize("name", KINDS)
def test_a_replica_copies_the_kinds_fields_at_its_api_group(name: str) -> None:
    kind = OPTIONAL[name]
    content, _ = KIND_CONTENTS[name]
    src = compiled(kind, raw(kind, "src", content, {REPLICATE_TO: "*"}))
    assert src.compiled is not None and src.compiled.invalid is None
    body = desired_body(src, "team")
    assert body["apiVersion"] == kind.resource.api_version and body["kind"] == kind.name
    assert {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")} \
        == content
    # Written as the server stores it, the replica is in sync: no write at all.
    replica = compiled(kind, {**body, "metadata": {**body["metadata"], "uid": "r",
                                                   "resourceVersion": "11"}})
    w = world([src, replica], [ns("src"), ns("team")], kind)
    assert decide("team", "default-deny", replica, w, SCOPE, AT_ONCE).action is None


@pytest.mark.parametrize("name", KINDS)
def test_a_hand_edit_of_a_replicas_fields_is_drift_and_updated_in_place(name: str) -> None:
    kind = OPTIONAL[name]
    content, edited = KIND_CONTENTS[name]
    src = compiled(kind, raw(kind, "src", content, {REPLICATE_TO: "*"}))
    body = desired_body(src, "team")
    body.update(edited)
    body["metadata"] = {**body["metadata"], "uid": "r", "resourceVersion": "11"}
    assert replica_hash(body, kind) != src.compiled.content_hash
    w = world([src, compiled(kind, body)], [ns("src"), ns("team")], kind)
    decision = decide("team", "default-deny", compiled(kind, body), w, SCOPE, AT_ONCE)
    assert decision.action is not None and decision.action.kind == "update"


def test_a_field_absent_or_empty_is_the_same_content() -> None:
    a = cached(raw(RESOURCEQUOTA, "src", {}, {REPLICATE_TO: "*"}), RESOURCEQUOTA)
    b = cached(raw(RESOURCEQUOTA, "src", {"spec": {}}, {REPLICATE_TO: "*"}), RESOURCEQUOTA)
    assert a.compiled is not None and b.compiled is not None
    assert a.compiled.content_hash == b.compiled.content_hash
    assert "spec" not in desired_body(a, "team")


@pytest.mark.parametrize(("annotation", "fault"), [
    (COPY_KEYS, "only a ConfigMap or a Secret has data keys (this is a NetworkPolicy, "
                "whose replicas copy spec)"),
    (REPLICA_TYPE, "only a Secret has a type (this is a NetworkPolicy)"),
])
def test_what_only_a_configmap_or_secret_has_is_an_invalid_spec(annotation: str,
                                                                 fault: str) -> None:
    content, _ = KIND_CONTENTS["networkpolicy"]
    src = cached(raw(NETWORKPOLICY, "src", content, {REPLICATE_TO: "*", annotation: "x"}),
                 NETWORKPOLICY)
    assert src.compiled is not None and src.compiled.invalid is not None
    assert fault in src.compiled.invalid


def test_plan_shows_a_kinds_fields_and_hash() -> None:
    content, _ = KIND_CONTENTS["limitrange"]
    src = cached(raw(LIMITRANGE, "src", content, {REPLICATE_TO: "*"}), LIMITRANGE)
    assert src.compiled is not None
    assert src.compiled.summary() == {"fields": ["spec"], "hash": src.compiled.content_hash}
    assert CONTENT_HASH in src.compiled.annotations


@pytest.mark.parametrize("name", KINDS)
def test_a_pull_entry_names_a_kind_by_its_lower_case_name(name: str) -> None:
    pulls = parse_pulls(f"{name}/platform/default-deny, platform/ca")
    assert pulls.entries == {(OPTIONAL[name].name, "platform/default-deny"),
                             ("ConfigMap", "platform/ca")}


def test_a_pull_of_a_kind_not_turned_on_says_which_flag() -> None:
    team = ns("team")
    team = type(team)(team.name, team.labels, team.terminating, team.resource_version,
                      pulls=parse_pulls("networkpolicy/platform/default-deny"))
    (refusal,) = unserved_pulls(team, frozenset({"ConfigMap"}))
    assert ("the operator replicates no NetworkPolicy objects (its --kinds does not name "
            "networkpolicy)") in refusal.message


def test_a_rolebinding_to_a_role_not_in_bindable_roles_is_an_invalid_spec() -> None:
    content, _ = KIND_CONTENTS["rolebinding"]
    admin = {**content, "roleRef": {**content["roleRef"], "name": "cluster-admin"}}
    src = compiled(ROLEBINDING, raw(ROLEBINDING, "src", admin, {REPLICATE_TO: "*"}))
    assert src.compiled is not None and src.compiled.invalid == (
        "roleRef: ClusterRole 'cluster-admin' is not one the operator may bind "
        "(--bindable-roles: edit, view)")
    w = world([src], [ns("src"), ns("team")], ROLEBINDING)
    assert decide("team", "default-deny", None, w, SCOPE, AT_ONCE).action is None
    # Without --bindable-roles no binding is valid.
    bare = cached(raw(ROLEBINDING, "src", content, {REPLICATE_TO: "*"}), ROLEBINDING)
    assert bare.compiled is not None and "(--bindable-roles: none)" in str(bare.compiled.invalid)


def test_a_rolebinding_whose_role_changes_is_recreated_and_whose_subjects_change_updated(
        ) -> None:
    content, edited = KIND_CONTENTS["rolebinding"]
    src = compiled(ROLEBINDING, raw(ROLEBINDING, "src", content, {REPLICATE_TO: "*"}))
    for fields, action in ((edited, "update"),
                           ({**content, "roleRef": {**content["roleRef"], "name": "edit"}},
                            "recreate")):
        body = {**desired_body(src, "team"), **fields}
        body["metadata"] = {**body["metadata"], "uid": "r", "resourceVersion": "11"}
        replica = compiled(ROLEBINDING, body)
        w = world([src, replica], [ns("src"), ns("team")], ROLEBINDING)
        decision = decide("team", "default-deny", replica, w, SCOPE, AT_ONCE)
        assert decision.action is not None and decision.action.kind == action, fields


def test_a_service_account_replica_never_carries_its_sources_token_secrets() -> None:
    fields = {"automountServiceAccountToken": False, "imagePullSecrets": [{"name": "regcred"}],
              "secrets": [{"name": "builder-token-x7k2p"}]}
    src = cached(raw(SERVICEACCOUNT, "src", fields, {REPLICATE_TO: "*"}), SERVICEACCOUNT)
    body = desired_body(src, "team")
    assert "secrets" not in body
    assert (body["automountServiceAccountToken"], body["imagePullSecrets"]) == (
        False, [{"name": "regcred"}])
    # Token Secrets the server (or a controller) adds to a replica are not drift.
    held = {**body, "secrets": [{"name": "builder-token-q9w8e"}],
            "metadata": {**body["metadata"], "uid": "r", "resourceVersion": "11"}}
    assert src.compiled is not None
    assert replica_hash(held, SERVICEACCOUNT) == src.compiled.content_hash

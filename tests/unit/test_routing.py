"""Event -> keys: every kind of watch event maps to exactly the keys it can affect."""

from __future__ import annotations

import copy
from typing import Any

from configmirror.operator.settings import DEFAULT_EXCLUDED
from configmirror.replication import routing
from configmirror.replication.model import (
    CachedObject,
    Key,
    Namespace,
    namespace_from_json,
    pull_key,
)
from configmirror.replication.model import source_key as any_source_key
from configmirror.replication.model import target_key as any_target_key
from configmirror.replication.plan import desired_body
from configmirror.replication.spec import (
    PULL,
    PULL_ALLOWED,
    REPLICATE_TO,
    REPLICATE_TO_MATCHING,
    Scope,
)
from configmirror.vocabulary import CONFIGMAP, SECRET, Kind
from configmirror_testing.builders import cached, ns, plain, source

SCOPE = Scope.from_flags("*", DEFAULT_EXCLUDED)


def source_key(namespace: str, name: str, kind: Kind = CONFIGMAP) -> Key:
    return any_source_key(kind, namespace, name)


def target_key(namespace: str, name: str, kind: Kind = CONFIGMAP) -> Key:
    return any_target_key(kind, namespace, name)


def object_keys(old: CachedObject | None, new: CachedObject | None, named: Any) -> set[Key]:
    return routing.object_keys(CONFIGMAP, old, new, named)


def namespace_keys(old: Namespace | None, new: Namespace | None, sources: Any, home_of: Any,
                   scope: Scope) -> set[Key]:
    return routing.namespace_keys(CONFIGMAP, old, new, sources, home_of, scope)


def replica(src: CachedObject, namespace: str, **edits: Any) -> CachedObject:
    body = copy.deepcopy(desired_body(src, namespace))
    body["metadata"].update(uid="r", resourceVersion="30")
    body.update(edits)
    return cached(body)


def home(name: str) -> Namespace:
    """Every source's namespace, as the cache has it: allowed to hold sources."""
    return ns(name, {"configmirror.io/source": "true"})


def sources_named(*sources: CachedObject) -> Any:
    return lambda name: [s for s in sources if s.name == name]


# -- ConfigMap events ---------------------------------------------------------------------


def test_a_new_source_wakes_its_source_key_only() -> None:
    src = source({REPLICATE_TO: "a"})
    assert object_keys(None, src, sources_named(src)) == {source_key("src", "cfg")}


def test_a_deleted_source_wakes_its_source_key_which_removes_its_replicas() -> None:
    src = source({REPLICATE_TO: "a"})
    assert object_keys(src, None, sources_named()) == {source_key("src", "cfg")}


def test_a_source_that_loses_its_annotations_wakes_its_source_key() -> None:
    before, after = source({REPLICATE_TO: "a"}), source({})
    assert object_keys(before, after, sources_named(after)) == {source_key("src", "cfg")}


def test_a_replica_event_wakes_its_target_key_whether_added_changed_or_deleted() -> None:
    src = source({REPLICATE_TO: "a"})
    written = replica(src, "a")
    edited = replica(src, "a", data={"k": "by hand"})
    want = {target_key("a", "cfg")}
    assert object_keys(None, written, sources_named(src)) == want
    assert object_keys(written, edited, sources_named(src)) == want
    assert object_keys(written, None, sources_named(src)) == want


def test_an_orphan_replica_wakes_its_target_key_even_with_no_source_left() -> None:
    src = source({REPLICATE_TO: "a"})
    assert object_keys(None, replica(src, "a"), sources_named()) == {target_key("a", "cfg")}


def resync_keys(obj: CachedObject, *cached: CachedObject) -> set[Key]:
    by_key = {c.key: c for c in cached}
    return routing.resync_keys(CONFIGMAP, obj, by_key.get, sources_named(*cached))


def test_a_resync_leaves_a_replica_of_a_cached_source_to_that_sources_plan() -> None:
    src = source({REPLICATE_TO: "a"})
    assert resync_keys(replica(src, "a"), src) == set()
    assert resync_keys(src, src) == {source_key("src", "cfg")}  # which plans the replica


def test_a_resync_wakes_a_replica_whose_source_cannot_plan_it() -> None:
    src = source({REPLICATE_TO: "a"})
    orphan = replica(src, "a")
    assert resync_keys(orphan) == {target_key("a", "cfg")}  # its source is gone
    assert resync_keys(orphan, source({})) == {target_key("a", "cfg")}  # no longer a source
    typo = source({REPLICATE_TO: "a", REPLICATE_TO_MATCHING: "env in (prod"})
    assert typo.compiled is not None and typo.compiled.invalid is not None
    assert resync_keys(orphan, typo) == {target_key("a", "cfg")}  # whose plan changes nothing


def test_a_resync_of_a_replica_that_is_a_source_itself_wakes_both_its_keys() -> None:
    src = source({REPLICATE_TO: "a"})
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(uid="r", resourceVersion="30")
    body["metadata"]["annotations"][REPLICATE_TO] = "b"  # someone made the replica a source
    both = cached(body)
    assert both.compiled is not None and both.replica_of == src.key
    assert resync_keys(both, src) == {source_key("a", "cfg"), target_key("a", "cfg")}


def test_a_foreign_object_where_a_same_named_source_lives_elsewhere_wakes_its_target() -> None:
    src = source({REPLICATE_TO: "a"})
    foreign = plain("a")
    assert object_keys(None, foreign, sources_named(src)) == {target_key("a", "cfg")}
    assert object_keys(foreign, None, sources_named(src)) == {target_key("a", "cfg")}


def test_an_unrelated_object_wakes_nothing() -> None:
    src = source({REPLICATE_TO: "a"})
    assert object_keys(None, plain("a", name="other"), sources_named(src)) == set()
    assert object_keys(None, plain("b", name="cfg"), sources_named()) == set()


def test_a_source_elsewhere_of_the_same_name_as_another_source_wakes_both_roles() -> None:
    one = source({REPLICATE_TO: "two"}, namespace="one")
    two = source({REPLICATE_TO: "one"}, namespace="two")
    assert object_keys(None, two, sources_named(one, two)) == {
        source_key("two", "cfg"), target_key("two", "cfg")}


# -- Namespace events -----------------------------------------------------------------------


def test_a_new_namespace_wakes_the_targets_of_the_sources_that_want_it() -> None:
    by_name = source({REPLICATE_TO: "team-*"}, name="by-name")
    by_label = source({REPLICATE_TO_MATCHING: "env=prod"}, name="by-label")
    other = source({REPLICATE_TO: "x"}, name="other")
    keys = namespace_keys(None, ns("team-a", {"env": "prod"}), [by_name, by_label, other],
                          home, SCOPE)
    assert keys == {target_key("team-a", "by-name"), target_key("team-a", "by-label")}


def test_a_relabel_wakes_only_the_sources_whose_wish_flips() -> None:
    by_name = source({REPLICATE_TO: "*"}, name="by-name")
    prod = source({REPLICATE_TO_MATCHING: "env=prod"}, name="prod")
    dev = source({REPLICATE_TO_MATCHING: "env=dev"}, name="dev")
    team = source({REPLICATE_TO_MATCHING: "team"}, name="team")
    old, new = ns("x", {"env": "dev", "team": "a"}), ns("x", {"env": "prod", "team": "b"})
    assert namespace_keys(old, new, [by_name, prod, dev, team], home, SCOPE) == {
        target_key("x", "prod"), target_key("x", "dev")}


def test_a_relabel_no_source_can_see_wakes_nothing() -> None:
    by_name = source({REPLICATE_TO: "team-*"})
    old, new = ns("x", {"env": "dev"}), ns("x", {"env": "prod"})
    assert namespace_keys(old, new, [by_name], home, SCOPE) == set()


def test_an_update_that_changes_no_label_wakes_nothing() -> None:
    src = source({REPLICATE_TO_MATCHING: "env=prod"})
    same = ns("x", {"env": "prod"})
    assert namespace_keys(same, same, [src], home, SCOPE) == set()


def test_ignore_label_and_terminating_flip_the_wish_off() -> None:
    src = source({REPLICATE_TO: "*"})
    plain_ns = ns("x")
    assert namespace_keys(plain_ns, ns("x", {"configmirror.io/ignore": "true"}), [src],
                          home, SCOPE) == {target_key("x", "cfg")}
    assert namespace_keys(plain_ns, ns("x", terminating=True), [src], home, SCOPE) == {
        target_key("x", "cfg")}


def test_a_deleted_namespace_wakes_nothing() -> None:
    src = source({REPLICATE_TO: "*"})
    assert namespace_keys(ns("x"), None, [src], home, SCOPE) == set()


def test_invalid_sources_and_sources_outside_source_namespaces_wake_nothing() -> None:
    bad = source({REPLICATE_TO: "team-["})
    scope = Scope.from_flags("other", DEFAULT_EXCLUDED)
    assert namespace_keys(None, ns("x"), [bad], home, SCOPE) == set()
    assert namespace_keys(None, ns("x"), [source({REPLICATE_TO: "*"})], home, scope) == set()


def test_keys_name_objects_and_print_readably() -> None:
    key = target_key("a", "cfg")
    assert key == Key("target", CONFIGMAP, "a", "cfg") and key.object_key == "a/cfg"
    assert str(source_key("src", "cfg")) == "source configmaps src/cfg"
    assert source_key("src", "cfg") != source_key("src", "cfg", SECRET)


SELECTOR = Scope.from_flags("*", DEFAULT_EXCLUDED, "configmirror.io/source=true")


def test_labelling_a_namespace_to_hold_sources_wakes_the_sources_in_it() -> None:
    here = source({REPLICATE_TO: "*"}, namespace="team")
    elsewhere = source({REPLICATE_TO: "*"}, namespace="other", name="other")
    old, new = ns("team"), ns("team", {"configmirror.io/source": "true"})
    keys = namespace_keys(old, new, [here, elsewhere], home, SELECTOR)
    assert keys == {source_key("team", "cfg")}, "`other` wants `team` before and after"
    assert namespace_keys(new, old, [here], home, SELECTOR) == {source_key("team", "cfg")}


def test_a_new_namespace_wakes_the_sources_already_in_it_whatever_its_labels() -> None:
    here = source({REPLICATE_TO: "*"}, namespace="team")
    assert namespace_keys(None, ns("team"), [here], home, SELECTOR) == {
        source_key("team", "cfg")}


def test_a_source_in_a_namespace_that_may_not_push_wakes_no_target() -> None:
    refused = source({REPLICATE_TO: "*"}, namespace="nobody")
    assert namespace_keys(None, ns("x"), [refused], ns, SELECTOR) == set()


# -- pulls ---------------------------------------------------------------------------------------


def pulling(name: str, pull: str | None, labels: dict[str, str] | None = None) -> Namespace:
    annotations = {PULL: pull} if pull is not None else {}
    return namespace_from_json({"metadata": {"name": name, "labels": labels or {},
                                             "resourceVersion": "2",
                                             "annotations": annotations}})


def test_a_pull_added_or_removed_wakes_exactly_the_target_it_adds_or_removes() -> None:
    wanted = source({PULL_ALLOWED: "*"}, namespace="platform", name="shared-ca")
    other = source({PULL_ALLOWED: "*"}, namespace="platform", name="other")
    before, after = pulling("team", None), pulling("team", "platform/shared-ca")
    keys = namespace_keys(before, after, [wanted, other], home, SCOPE)
    assert keys == {target_key("team", "shared-ca"), pull_key(CONFIGMAP, "team")}
    assert namespace_keys(after, before, [wanted, other], home, SCOPE) == keys


def test_a_pull_without_consent_wakes_only_its_pull_key() -> None:
    closed = source({REPLICATE_TO: "x"}, namespace="platform", name="shared-ca")
    keys = namespace_keys(pulling("team", None), pulling("team", "platform/shared-ca"),
                          [closed], home, SCOPE)
    assert keys == {pull_key(CONFIGMAP, "team")}


def test_a_namespace_that_pulls_nothing_and_keeps_its_labels_wakes_nothing() -> None:
    src = source({PULL_ALLOWED: "*"}, namespace="platform", name="shared-ca")
    same = pulling("team", "platform/shared-ca")
    assert namespace_keys(same, pulling("team", "platform/shared-ca"), [src], home,
                          SCOPE) == set()

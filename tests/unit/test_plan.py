"""The pure domain: annotations -> spec, caches -> plan. One behaviour of the docs per test."""

from __future__ import annotations

import copy
import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from configmirror.replication.admission import ADMITTED
from configmirror.replication.model import (
    CONTENT_HASH,
    LAST_APPLIED,
    MANAGED_BY,
    RELEASED_FROM,
    REPLICA_LABEL,
    REPLICA_OF,
    Namespace,
    admission_changes,
    kept_as_written,
    replica_hash,
)
from configmirror.replication.plan import (
    Decision,
    Grace,
    decide,
    desired_body,
    in_sync,
    plan_source,
    pull_refusals,
    unserved_pulls,
)
from configmirror.replication.spec import (
    DEFAULT_EXCLUDED,
    ON_DELETE,
    PULL_ALLOWED,
    PULL_ALLOWED_MATCHING,
    REPLICATE_TO,
    REPLICATE_TO_MATCHING,
    SYNC,
    InvalidSpec,
    Scope,
    parse_patterns,
    parse_pulls,
)
from configmirror.vocabulary import CONFIGMAP, SECRET
from configmirror_testing.builders import (
    AT_ONCE,
    KEY,
    SCOPE,
    ConfigMap,
    cached,
    kinds,
    ns,
    plain,
    plan,
    puller,
    replica_of,
    source,
    world,
)

ALL = [ns("src"), ns("a"), ns("b"), ns("kube-system"), ns("default")]


# -- patterns ---------------------------------------------------------------------------


@pytest.mark.parametrize(("patterns", "name", "expected"), [
    ("a,b", "a", True),
    ("a, b ", "b", True),
    ("team-*", "team-x", True),
    ("team-*", "xteam-x", False),
    ("team-*", "team", False),
    ("t?", "t1", True),
    ("t?", "t12", False),
    ("ns-[a-c]", "ns-b", True),
    ("ns-[a-c]", "ns-d", False),
    ("ns-[!a-c]", "ns-d", True),
    ("*,!kube-*", "kube-system", False),
    ("*,!kube-*", "default", True),
    ("!a", "a", False),
    ("a,,b,", "b", True),
])
def test_patterns_match_whole_names(patterns: str, name: str, expected: bool) -> None:
    assert parse_patterns(patterns).matches(name) is expected


@pytest.mark.parametrize("bad", ["", " , ", "!", "ns-[", "ns-[]", "ns-[z-a]", "Team",
                                 "team_x", "a b", "ns/x"])
def test_invalid_patterns_name_the_entry(bad: str) -> None:
    with pytest.raises(InvalidSpec, match=REPLICATE_TO):
        parse_patterns(bad)


@given(st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True))
def test_an_exact_name_matches_itself_and_star_matches_everything(name: str) -> None:
    assert parse_patterns(name).matches(name)
    assert parse_patterns("*").matches(name)
    assert not parse_patterns(f"*,!{name}").matches(name)


GLOB = st.from_regex(r"[a-c*?-]{1,4}|[a-c]\[!?a-b\]", fullmatch=True)


@given(st.lists(GLOB, min_size=1, max_size=4), st.lists(GLOB, max_size=3),
       st.from_regex(r"[a-c-]{1,5}", fullmatch=True))
def test_patterns_match_what_one_include_and_no_exclude_match(
        includes: list[str], excludes: list[str], name: str) -> None:
    # The entries are matched as one expression per side; the definition is entry by entry.
    text = ",".join([*includes, *(f"!{e}" for e in excludes)])
    expected = (any(fnmatch.fnmatchcase(name, g) for g in includes)
                and not any(fnmatch.fnmatchcase(name, g) for g in excludes))
    assert parse_patterns(text).matches(name) is expected


# -- targets ----------------------------------------------------------------------------


def test_star_targets_every_namespace_but_its_own_and_the_default_exclusions() -> None:
    p = plan(source(), ALL)
    assert p.targets == ("a", "b", "default")
    assert kinds(p) == [("create", "a"), ("create", "b"), ("create", "default")]


def test_selector_and_names_are_a_union() -> None:
    src = source({REPLICATE_TO: "a", REPLICATE_TO_MATCHING: "env=prod"})
    p = plan(src, [ns("a"), ns("b", {"env": "prod"}), ns("c", {"env": "dev"})])
    assert p.targets == ("a", "b")


def test_selector_only() -> None:
    src = source({REPLICATE_TO_MATCHING: "tier in (x,y),!legacy"})
    p = plan(src, [ns("a", {"tier": "x"}), ns("b", {"tier": "x", "legacy": ""}),
                   ns("c", {"tier": "z"})])
    assert p.targets == ("a",)


def test_ignore_label_and_terminating_namespaces_are_never_targets() -> None:
    p = plan(source(), [ns("a", {"configmirror.io/ignore": "true"}), ns("b", terminating=True),
                        ns("c")])
    assert p.targets == ("c",)


@pytest.mark.parametrize("labels", [{}, {"configmirror.io/source": "true"}])
def test_the_operators_own_namespace_is_never_a_target_whatever_its_labels(
        labels: dict[str, str]) -> None:
    scope = Scope.from_flags("*", "", operator_namespace="default")
    assert plan(source(), [ns("a"), ns("default", labels)], scope=scope).targets == ("a",)
    other = plan(source(), [ns("a"), ns("default", labels)], scope=Scope.from_flags("*", ""))
    assert other.targets == ("a", "default"), "with no operator there, an ordinary namespace"


def test_operator_exclusions_and_source_namespaces() -> None:
    scope = Scope.from_flags("src", "b,kube-*")
    assert plan(source(), ALL, scope=scope).targets == ("a", "default")
    outside = Scope.from_flags("other-*", "")
    refused = plan(source(), ALL, scope=outside)
    assert refused.targets == () and not refused.in_sync
    assert refused.not_allowed is not None and "--source-namespaces" in refused.not_allowed


def test_a_source_namespace_must_match_the_source_namespace_selector() -> None:
    scope = Scope.from_flags("*", DEFAULT_EXCLUDED, "configmirror.io/source=true")
    unlabelled = plan(source(), ALL, scope=scope)
    assert unlabelled.targets == () and unlabelled.not_allowed is not None
    assert "--source-namespace-selector=configmirror.io/source=true" in unlabelled.not_allowed
    allowed = [ns("src", {"configmirror.io/source": "true"}), ns("a")]
    p = plan(source(), allowed, scope=scope)
    assert p.not_allowed is None and p.targets == ("a",)


def test_a_source_whose_namespace_may_no_longer_push_loses_its_replicas() -> None:
    src = source({REPLICATE_TO: "a"})
    scope = Scope.from_flags("*", DEFAULT_EXCLUDED, "configmirror.io/source=true")
    p = plan(src, ALL, [replica_of(src, "a")], scope=scope)
    assert kinds(p) == [("delete", "a")]
    assert p.actions[0].why == "source namespace may not hold sources"


def test_a_source_whose_namespace_is_not_cached_yet_decides_nothing() -> None:
    src = source({REPLICATE_TO: "a"})
    p = plan(src, [ns("a")], [replica_of(src, "a", data={"k": "old"})], home=False)
    assert p.actions == () and p.not_allowed is None


def test_a_bad_source_namespace_selector_names_the_flag() -> None:
    with pytest.raises(InvalidSpec, match="--source-namespace-selector"):
        Scope.from_flags("*", "", "env in (a")


# -- the plan ---------------------------------------------------------------------------


def test_in_sync_replicas_need_no_write() -> None:
    src = source({REPLICATE_TO: "a,b"})
    p = plan(src, ALL, [replica_of(src, "a"), replica_of(src, "b")])
    assert p.in_sync and p.actions == ()


def test_source_edit_updates_every_replica() -> None:
    old = source({REPLICATE_TO: "a,b"})
    new = source({REPLICATE_TO: "a,b"}, data={"k": "changed"})
    p = plan(new, ALL, [replica_of(old, "a"), replica_of(old, "b", rv="21")])
    assert kinds(p) == [("update", "a"), ("update", "b")]
    assert [a.resource_version for a in p.actions] == ["20", "21"]


def test_source_label_change_updates_replicas() -> None:
    old = source({REPLICATE_TO: "a"})
    new = source({REPLICATE_TO: "a"}, labels={"team": "x"})
    assert kinds(plan(new, ALL, [replica_of(old, "a")])) == [("update", "a")]


def test_hand_edited_replica_is_restored() -> None:
    src = source({REPLICATE_TO: "a"})
    edited = replica_of(src, "a", data={"k": "hand-edited"})
    assert kinds(plan(src, ALL, [edited])) == [("update", "a")]


def test_a_label_or_annotation_configmirror_does_not_write_is_not_drift() -> None:
    src = source({REPLICATE_TO: "a"}, labels={"team": "x"})
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(uid="r", resourceVersion="3")
    body["metadata"]["annotations"]["someone"] = "added this"
    body["metadata"]["labels"]["cost-centre"] = "42"
    assert kinds(plan(src, ALL, [cached(body)])) == [], "not ours: left as it is"
    body["metadata"]["labels"]["team"] = "y"
    assert kinds(plan(src, ALL, [cached(body)])) == [("update", "a")], "ours: restored"


@pytest.mark.parametrize("mark", [None, "0" * 32, ""])
def test_a_replica_whose_content_hash_mark_is_missing_or_wrong_is_restored(
        mark: str | None) -> None:
    src = source({REPLICATE_TO: "a"})
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(uid="r", resourceVersion="3")
    if mark is None:
        del body["metadata"]["annotations"][CONTENT_HASH]
    else:
        body["metadata"]["annotations"][CONTENT_HASH] = mark
    edited = cached(body)
    assert edited.replica_of == KEY, "still our replica: only its mark was edited"
    assert kinds(plan(src, ALL, [edited])) == [("update", "a")]
    assert target("cfg", "a", edited, [src]).action is not None


def test_an_object_naming_a_source_of_another_name_is_not_a_replica() -> None:
    src = source({REPLICATE_TO: "a"})
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(name="other", uid="r", resourceVersion="3")
    assert cached(body).replica_of is None, "we write replicas under the source's name only"


def test_deleted_replica_is_recreated() -> None:
    src = source({REPLICATE_TO: "a,b"})
    assert kinds(plan(src, ALL, [replica_of(src, "a")])) == [("create", "b")]


def test_namespace_that_stops_matching_loses_its_replica() -> None:
    src = source({REPLICATE_TO: "a"})
    p = plan(src, ALL, [replica_of(src, "a"), replica_of(src, "b")])
    assert kinds(p) == [("delete", "b")]
    assert p.actions[0].resource_version == "20"


def test_deleted_source_loses_all_replicas() -> None:
    src = source({REPLICATE_TO: "a,b"})
    p = plan(None, ALL, [replica_of(src, "a"), replica_of(src, "b")])
    assert kinds(p) == [("delete", "a"), ("delete", "b")]
    assert p.actions[0].why == "source deleted"


def test_source_without_annotations_loses_all_replicas() -> None:
    src = source({REPLICATE_TO: "a"})
    unannotated = source({})
    p = plan(unannotated, ALL, [replica_of(src, "a")])
    assert kinds(p) == [("delete", "a")]
    assert p.actions[0].why == "source no longer replicates"


def test_replicas_in_terminating_namespaces_are_left_to_the_namespace_controller() -> None:
    src = source({REPLICATE_TO: "a"})
    p = plan(None, [ns("a", terminating=True)], [replica_of(src, "a")])
    assert p.actions == ()


def test_foreign_configmap_is_a_conflict_and_never_touched() -> None:
    src = source({REPLICATE_TO: "a,b"})
    p = plan(src, ALL, [plain("a")])
    assert kinds(p) == [("create", "b")]
    assert [(c.namespace, c.owner) for c in p.conflicts] == [("a", None)]
    assert "not a replica" in p.conflicts[0].message


def test_configmap_claiming_to_be_a_replica_without_our_label_is_foreign() -> None:
    src = source({REPLICATE_TO: "a"})
    p = plan(src, ALL, [plain("a", annotations={REPLICA_OF: KEY})])
    assert p.actions == () and len(p.conflicts) == 1


def test_two_sources_same_name_existing_replica_wins() -> None:
    first = source({REPLICATE_TO: "a"}, namespace="one")
    second = source({REPLICATE_TO: "a"}, namespace="two")
    p = plan(second, [ns("a"), ns("one"), ns("two")], [first, replica_of(first, "a")],
             key="two/cfg")
    assert p.actions == ()
    assert [(c.namespace, c.owner) for c in p.conflicts] == [("a", "one/cfg")]
    assert p.conflicts[0].message == "a/cfg is already a replica of one/cfg; it is left as it is"


def test_the_replica_of_a_deleted_source_goes_and_a_same_named_source_takes_its_place() -> None:
    gone = source({REPLICATE_TO: "a"}, namespace="one")
    heir = source({REPLICATE_TO: "a"}, namespace="two")
    spaces = [ns("a"), ns("one"), ns("two")]
    p = plan(heir, spaces, [replica_of(gone, "a")], key="two/cfg")
    assert [(a.kind, a.namespace, a.source) for a in p.actions] == [("create", "a", "two/cfg")]
    assert "replaces the replica of one/cfg (source deleted)" in p.actions[0].why
    orphan = plan(None, spaces, [heir, replica_of(gone, "a")], key="one/cfg")
    assert [(a.kind, a.namespace, a.why) for a in orphan.actions] == [
        ("delete", "a", "source deleted")]


def test_immutable_replica_that_must_change_is_recreated() -> None:
    old = source({REPLICATE_TO: "a"}, immutable=True)
    new = source({REPLICATE_TO: "a"}, data={"k": "v2"}, immutable=True)
    assert kinds(plan(new, ALL, [replica_of(old, "a")])) == [("recreate", "a")]


def test_immutable_replica_in_sync_is_left_alone() -> None:
    src = source({REPLICATE_TO: "a"}, immutable=True)
    assert plan(src, ALL, [replica_of(src, "a")]).actions == ()


def test_invalid_spec_changes_nothing() -> None:
    good = source({REPLICATE_TO: "a"})
    bad = source({REPLICATE_TO: "a", REPLICATE_TO_MATCHING: "env in (prod"})
    p = plan(bad, ALL, [replica_of(good, "a")])
    assert p.actions == () and p.invalid is not None
    assert REPLICATE_TO_MATCHING in p.invalid and "at the end" in p.invalid


def test_invalid_glob_names_the_entry() -> None:
    p = plan(source({REPLICATE_TO: "a,team-["}), ALL)
    assert p.invalid is not None and "'team-['" in p.invalid


# -- what a replica is --------------------------------------------------------------------


def test_replica_copies_content_and_marks_itself() -> None:
    src = source({REPLICATE_TO: "a", "team": "x", LAST_APPLIED: "{}",
                  "configmirror.io/other": "y"}, labels={"app": "web"},
                 data={"k": "v"}, immutable=True)
    body = desired_body(src, "a")
    meta = body["metadata"]
    assert (meta["namespace"], meta["name"]) == ("a", "cfg")
    assert body["data"] == {"k": "v"} and body["immutable"] is True
    assert meta["labels"] == {"app": "web", REPLICA_LABEL: "true",
                              "app.kubernetes.io/managed-by": "configmirror"}
    assert set(meta["annotations"]) == {"team", REPLICA_OF, CONTENT_HASH}
    assert meta["annotations"][REPLICA_OF] == KEY


def test_only_a_source_has_a_replica_body() -> None:
    with pytest.raises(ValueError, match="a/cfg is not a source"):
        desired_body(plain("a"), "b")


def test_cache_keeps_source_content_but_only_a_hash_of_replicas() -> None:
    src = source({REPLICATE_TO: "a"}, data={"big": "x" * 1000})
    assert src.compiled is not None and src.compiled.payload["data"] == {"big": "x" * 1000}
    replica = replica_of(src, "a")
    assert replica.compiled is None and replica.replica_of == KEY
    assert len(replica.content_hash) == 32
    assert plain("a").content_hash == "" and plain("a").compiled is None


def test_the_digest_a_source_wants_is_what_the_cache_computes_from_its_replica() -> None:
    """Expectations record a write with the source's digest; the informer's transform of the
    same object must agree, or our own writes would look like drift."""
    src = source({REPLICATE_TO: "a"}, data={"k": "v"}, labels={"x": "y"}, immutable=True)
    assert src.compiled is not None
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(uid="u", resourceVersion="7")
    assert cached(body).content_hash == src.compiled.content_hash
    assert body["metadata"]["annotations"][CONTENT_HASH] == src.compiled.content_hash


def test_a_source_is_compiled_once_per_version_into_an_immutable_value() -> None:
    src = source({REPLICATE_TO: "a,b"})
    assert src.compiled is not None and src.compiled.spec is not None
    assert src.compiled.invalid is None
    with pytest.raises(AttributeError):
        src.compiled.content_hash = "x"  # type: ignore[misc]


# -- one target ---------------------------------------------------------------------------


def target(name: str, namespace: str, current: ConfigMap | None, sources: list[ConfigMap],
           namespaces: list[Namespace] = ALL, grace: Grace | None = None) -> Decision:
    by_name = {n.name: n for n in [ns("src"), ns("one"), ns("two"), *namespaces]}
    w = world([*sources, *([current] if current else [])], list(by_name.values()))
    return decide(namespace, name, current, w, SCOPE, grace or AT_ONCE)


def test_target_missing_is_created_for_the_source_that_wants_it() -> None:
    src = source({REPLICATE_TO: "a"})
    p = target("cfg", "a", None, [src])
    assert p.action is not None and (p.action.kind, p.action.source) == ("create", KEY)
    assert p.owner is src and p.conflicts == ()


def test_target_nobody_wants_is_left_alone() -> None:
    assert target("cfg", "b", None, [source({REPLICATE_TO: "a"})]).action is None
    assert target("cfg", "a", plain("a"), []).action is None


def test_target_in_sync_needs_no_write_and_drift_is_repaired() -> None:
    src = source({REPLICATE_TO: "a"})
    assert target("cfg", "a", replica_of(src, "a"), [src]).action is None
    edited = replica_of(src, "a", data={"k": "hand-edited"})
    p = target("cfg", "a", edited, [src])
    assert p.action is not None and (p.action.kind, p.action.resource_version) == ("update", "20")


def test_target_foreign_object_is_a_conflict_for_every_source_that_wants_it() -> None:
    one = source({REPLICATE_TO: "a"}, namespace="one")
    two = source({REPLICATE_TO: "a"}, namespace="two")
    p = target("cfg", "a", plain("a"), [one, two], [ns("a"), ns("one"), ns("two")])
    assert p.action is None
    assert sorted((c.source, c.owner) for c in p.conflicts) == [("one/cfg", None),
                                                                ("two/cfg", None)]


def test_target_two_sources_one_name_the_existing_replica_wins() -> None:
    one = source({REPLICATE_TO: "a"}, namespace="one")
    two = source({REPLICATE_TO: "a"}, namespace="two", data={"k": "other"})
    spaces = [ns("a"), ns("one"), ns("two")]
    p = target("cfg", "a", replica_of(two, "a"), [one, two], spaces)
    assert p.action is None and p.owner is two
    assert [(c.source, c.owner) for c in p.conflicts] == [("one/cfg", "two/cfg")]


def test_target_two_sources_one_name_and_no_replica_the_older_source_gets_it() -> None:
    older = source({REPLICATE_TO: "a"}, namespace="two", created="2026-01-01T00:00:00Z")
    newer = source({REPLICATE_TO: "a"}, namespace="one", created="2026-01-02T00:00:00Z")
    p = target("cfg", "a", None, [newer, older], [ns("a"), ns("one"), ns("two")])
    assert p.action is not None and p.action.source == "two/cfg"
    assert [(c.source, c.owner) for c in p.conflicts] == [("one/cfg", "two/cfg")]
    assert "two/cfg, the older source" in p.conflicts[0].message


def test_target_two_sources_created_in_the_same_second_go_by_namespace_name() -> None:
    one = source({REPLICATE_TO: "a"}, namespace="one")
    two = source({REPLICATE_TO: "a"}, namespace="two")
    p = target("cfg", "a", None, [two, one], [ns("a"), ns("one"), ns("two")])
    assert p.action is not None and p.action.source == "one/cfg"
    assert [(c.source, c.owner) for c in p.conflicts] == [("two/cfg", "one/cfg")]


def test_target_orphan_is_deleted_with_the_reason() -> None:
    src = source({REPLICATE_TO: "a"})
    orphan = replica_of(src, "b")
    p = target("cfg", "b", orphan, [src])
    assert p.action is not None and (p.action.kind, p.action.why) == (
        "delete", "namespace no longer targeted")
    gone = target("cfg", "a", replica_of(src, "a"), [])
    assert gone.action is not None and gone.action.why == "source deleted"


def test_target_of_an_invalid_source_is_kept() -> None:
    good = source({REPLICATE_TO: "a"})
    bad = source({REPLICATE_TO: "a,team-["})
    assert target("cfg", "a", replica_of(good, "a"), [bad]).action is None


def test_target_in_a_terminating_or_missing_namespace_is_never_written() -> None:
    src = source({REPLICATE_TO: "*"})
    assert target("cfg", "t", None, [src], [ns("t", terminating=True)]).action is None
    assert target("cfg", "gone", replica_of(src, "gone"), [src], []).action is None


def test_target_immutable_replica_that_must_change_is_recreated() -> None:
    old = source({REPLICATE_TO: "a"}, immutable=True)
    new = source({REPLICATE_TO: "a"}, data={"k": "v2"}, immutable=True)
    p = target("cfg", "a", replica_of(old, "a"), [new])
    assert p.action is not None and p.action.kind == "recreate"


@given(st.lists(st.sampled_from(["a", "b", "default", "kube-system"]), unique=True),
       st.sampled_from(["a", "b", "default", "kube-system"]))
def test_source_and_target_plans_agree_on_where_replicas_go(existing: list[str],
                                                            where: str) -> None:
    src = source({REPLICATE_TO: "a,default"})
    replicas = [replica_of(src, n) for n in existing]
    by_ns = {r.namespace: r for r in replicas}
    whole = plan(src, ALL, replicas)
    one = target("cfg", where, by_ns.get(where), [src])
    in_whole = [(a.kind, a.namespace) for a in whole.actions if a.namespace == where]
    assert in_whole == ([(one.action.kind, where)] if one.action else [])


# -- what admission made of our writes ----------------------------------------------------------


def stamped(src: ConfigMap, namespace: str, stamp: str = "1") -> ConfigMap:
    """A replica as a mutating webhook stored it: our write, plus a label and a stamp."""
    body = copy.deepcopy(desired_body(src, namespace))
    body["metadata"].update(uid=f"r-{namespace}", resourceVersion="21")
    body["metadata"]["labels"] = {**body["metadata"]["labels"], "policy.example/owner": "team"}
    body["metadata"]["annotations"] = {**body["metadata"]["annotations"],
                                       "policy.example/stamp": stamp}
    return cached(body)


def test_a_replica_admission_added_fields_to_is_in_sync_with_no_memory_at_all() -> None:
    src = source({REPLICATE_TO: "a,b"})
    assert src.compiled is not None
    mutated = stamped(src, "a")
    assert mutated.content_hash != src.compiled.content_hash, "the stamp is in its digest"
    assert in_sync(mutated, src.compiled), "fields configmirror does not write are not drift"
    assert in_sync(stamped(src, "a", stamp="2"), src.compiled), "a new stamp neither"
    decision = target("cfg", "a", mutated, [src])
    assert decision.action is None and decision.owner is src
    assert kinds(plan(src, [ns("src"), ns("a"), ns("b")], [mutated])) == [("create", "b")]


def admitted(src: ConfigMap, data: dict[str, str] | None = None,
             labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> ConfigMap:
    """The replica of `src` in namespace a as a policy stored it (our write, plus an owner
    label), with some fields set over it (by the policy, or by hand)."""
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(uid="r-a", resourceVersion="22")
    body["metadata"]["labels"] = {**body["metadata"]["labels"], "policy.example/owner": "team",
                                  **(labels or {})}
    body["metadata"]["annotations"] = {**body["metadata"]["annotations"], **(annotations or {})}
    body["data"] = {**body["data"], **(data or {})}
    return cached(body)


def test_a_hand_edit_of_a_field_configmirror_writes_is_drift_on_an_admitted_replica() -> None:
    src = source({REPLICATE_TO: "a"}, labels={"team": "x"})
    assert src.compiled is not None
    assert in_sync(admitted(src), src.compiled)
    for edit in ({"data": {"k": "hand-edited"}}, {"data": {"extra": "added"}},
                 {"labels": {"team": "y"}}, {"annotations": {CONTENT_HASH: "0" * 32}}):
        assert not in_sync(admitted(src, **edit), src.compiled), edit
    newer = source({REPLICATE_TO: "a"}, data={"k": "v2"}, labels={"team": "x"})
    assert newer.compiled is not None
    assert not in_sync(stamped(src, "a"), newer.compiled), "a source edit is seen"


def test_fields_the_admitted_mark_names_are_admissions_and_the_rest_still_ours() -> None:
    src = source({REPLICATE_TO: "a"}, data={"k": "v", "other": "o"})
    assert src.compiled is not None
    rewritten = {"data": {"k": "set by policy"}}
    assert not in_sync(admitted(src, **rewritten), src.compiled), "no mark"
    marked = admitted(src, **rewritten, annotations={ADMITTED: "data/k"})
    assert marked.admitted == frozenset({"data/k"})
    assert in_sync(marked, src.compiled), "named by the mark: admission's"
    added = admitted(src, data={"policy": "1"},
                        annotations={ADMITTED: "data/policy"})
    assert in_sync(added, src.compiled), "a key admission adds, named, is admission's too"
    also_edited = admitted(src, data={"k": "policy", "other": "by hand"},
                              annotations={ADMITTED: "data/k"})
    assert not in_sync(also_edited, src.compiled), "another key edited by hand is drift"
    newer = source({REPLICATE_TO: "a"}, data={"k": "v2", "other": "o"})
    assert newer.compiled is not None
    ours = admitted(src, **rewritten, annotations={
        ADMITTED: f"data/k, annotation/{CONTENT_HASH}, label/{REPLICA_LABEL}"})
    assert ours.admitted == frozenset({"data/k"}), "our own marks are never admission's"
    assert not in_sync(ours, newer.compiled), "so a source edit is always seen"


def test_what_admission_changed_is_named_by_keys_never_by_values() -> None:
    src = source({REPLICATE_TO: "a"}, data={"k": "secret-value", "gone": "x"})
    assert src.compiled is not None
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"]["labels"]["policy.example/owner"] = "team"
    body["metadata"]["annotations"][CONTENT_HASH] = "whatever"  # ours: not compared
    body["data"] = {"k": "changed-value", "added": "y"}
    body["immutable"] = True
    said = admission_changes(src.compiled, body, CONFIGMAP)
    assert said == ("label policy.example/owner added, data key added added, "
                    "data key gone removed, data key k changed, immutable changed")
    assert "value" not in said and "team" not in said
    assert admission_changes(src.compiled, desired_body(src, "a"), CONFIGMAP) == \
        "nothing that is compared"
    assert replica_hash(desired_body(src, "a"), CONFIGMAP) == src.compiled.content_hash


def test_a_replica_kept_as_written_is_told_apart_without_hashing() -> None:
    src = source({REPLICATE_TO: "a"}, data={"k": "v"})
    assert src.compiled is not None
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(uid="u", resourceVersion="7", creationTimestamp="2026-12-01T00:00:00Z")
    assert kept_as_written(src.compiled, body, CONFIGMAP)
    body["metadata"]["labels"]["policy.example/owner"] = "team"
    assert not kept_as_written(src.compiled, body, CONFIGMAP)


# -- lifecycle: the grace, retain, once ----------------------------------------------------------


def grace_seen(seconds: float, now: float, seen: dict[str, float]) -> Grace:
    return Grace(seconds, now, seen.get)


def test_a_removal_waits_the_grace_from_when_its_cause_was_first_seen() -> None:
    src = source({REPLICATE_TO: "a"})
    orphan = replica_of(src, "b")
    fresh = target("cfg", "b", orphan, [src], grace=grace_seen(60, 1000, {}))
    assert fresh.action is not None and (fresh.action.kind, fresh.action.due_in) == ("delete", 60)
    later = target("cfg", "b", orphan, [src], grace=grace_seen(60, 1042, {"b/cfg": 1000}))
    assert later.action is not None and later.action.due_in == 18
    due = target("cfg", "b", orphan, [src], grace=grace_seen(60, 1060, {"b/cfg": 1000}))
    assert due.action is not None and due.action.due_in == 0
    assert plan(None, ALL, [orphan], grace=grace_seen(60, 1000, {})).actions[0].due_in == 60


def test_an_update_a_create_and_a_recreate_never_wait() -> None:
    old = source({REPLICATE_TO: "a,b,c"}, immutable=True)
    new = source({REPLICATE_TO: "a,b,c"}, data={"k": "v2"}, immutable=True)
    p = plan(new, [*ALL, ns("c")], [replica_of(old, "a")], grace=grace_seen(60, 1000, {}))
    assert [(a.kind, a.namespace, a.due_in) for a in p.actions] == [
        ("recreate", "a", 0), ("create", "b", 0), ("create", "c", 0)]


def test_the_heir_of_a_removed_replica_waits_with_it() -> None:
    gone = source({REPLICATE_TO: "a"}, namespace="one")
    heir = source({REPLICATE_TO: "a"}, namespace="two")
    d = target("cfg", "a", replica_of(gone, "a"), [heir], [ns("a"), ns("two")],
               grace=grace_seen(60, 1000, {}))
    assert d.action is not None and d.then is not None
    assert (d.then.kind, d.then.source, d.then.due_in) == ("create", "two/cfg", 60)


def test_a_replica_of_a_retain_source_carries_the_mark_and_is_released_when_it_is_deleted(
        ) -> None:
    src = source({REPLICATE_TO: "a", ON_DELETE: "retain"})
    replica = replica_of(src, "a")
    assert desired_body(src, "a")["metadata"]["annotations"][ON_DELETE] == "retain"
    assert replica.retain
    d = target("cfg", "a", replica, [])
    assert d.action is not None and (d.action.kind, d.action.why) == ("release", "source deleted")
    assert kinds(plan(None, ALL, [replica])) == [("release", "a")]


def test_a_source_that_loses_its_targets_but_keeps_retain_releases_its_replicas() -> None:
    src = source({REPLICATE_TO: "a", ON_DELETE: "retain"})
    unannotated = source({ON_DELETE: "retain"})
    assert unannotated.compiled is None and unannotated.retain
    p = plan(unannotated, ALL, [replica_of(src, "a")])
    assert [(a.kind, a.why) for a in p.actions] == [("release", "source no longer replicates")]
    # The last version seen decides: it said nothing of retain, so the replicas go.
    bare = source({})
    assert kinds(plan(bare, ALL, [replica_of(src, "a")])) == [("delete", "a")]


def test_retain_is_about_the_source_going_away_not_a_namespace_leaving() -> None:
    src = source({REPLICATE_TO: "a", ON_DELETE: "retain"})
    p = plan(src, ALL, [replica_of(src, "b")])
    assert [(a.kind, a.why) for a in p.actions] == [
        ("create", "missing"), ("delete", "namespace no longer targeted")]
    scope = Scope.from_flags("*", DEFAULT_EXCLUDED, "configmirror.io/source=true")
    refused = plan(src, ALL, [replica_of(src, "a")], scope=scope)
    assert [(a.kind, a.why) for a in refused.actions] == [
        ("delete", "source namespace may not hold sources")]


def test_a_released_replica_is_its_namespace_own_object() -> None:
    src = source({REPLICATE_TO: "a"})
    body = copy.deepcopy(desired_body(src, "a"))
    body["metadata"].update(uid="r", resourceVersion="3")
    for label in (REPLICA_LABEL, MANAGED_BY):
        del body["metadata"]["labels"][label]
    body["metadata"]["annotations"] = {RELEASED_FROM: KEY}
    released = cached(body)
    assert released.replica_of is None
    d = target("cfg", "a", released, [src])
    assert d.action is None and [c.owner for c in d.conflicts] == [None]


def test_sync_once_creates_a_missing_replica_and_never_updates_one() -> None:
    old = source({REPLICATE_TO: "a,b", SYNC: "once"})
    new = source({REPLICATE_TO: "a,b", SYNC: "once"}, data={"k": "v2"})
    edited = replica_of(old, "a", data={"k": "by hand"})
    p = plan(new, ALL, [edited])
    assert kinds(p) == [("create", "b")], "a stays as it is, edits and all"
    assert target("cfg", "a", edited, [new]).action is None
    assert kinds(plan(None, ALL, [edited])) == [("delete", "a")], "the source going removes it"


@pytest.mark.parametrize(("annotation", "value"), [(ON_DELETE, "keep"), (SYNC, "sometimes"),
                                                   (ON_DELETE, "")])
def test_a_lifecycle_value_that_does_not_parse_is_an_invalid_spec_that_changes_nothing(
        annotation: str, value: str) -> None:
    good = source({REPLICATE_TO: "a"})
    bad = source({REPLICATE_TO: "a", annotation: value}, data={"k": "v2"})
    p = plan(bad, ALL, [replica_of(good, "a")])
    assert p.actions == () and p.invalid is not None
    assert annotation in p.invalid and repr(value) in p.invalid


# -- pull: a namespace asks, the source consents ---------------------------------------------


def test_pull_entries_parse_with_configmap_as_the_default_kind() -> None:
    pulls = parse_pulls(" platform/shared-ca, secret/platform/registry-creds,configmap/a/b ,")
    assert pulls.entries == {("ConfigMap", "platform/shared-ca"),
                             ("Secret", "platform/registry-creds"), ("ConfigMap", "a/b")}
    assert pulls.faults == ()


@pytest.mark.parametrize("bad", ["shared-ca", "a/b/c/d", "pod/a/b", "A/b", "a/B_c", "/b", "a/"])
def test_a_pull_entry_that_does_not_parse_is_a_fault_and_the_others_still_count(bad: str) -> None:
    pulls = parse_pulls(f"ok/cfg, {bad}")
    assert pulls.entries == {("ConfigMap", "ok/cfg")}
    assert [entry for entry, _ in pulls.faults] == [bad]


def test_a_pulled_source_that_allows_the_namespace_gets_a_replica_there() -> None:
    src = source({PULL_ALLOWED: "team-*"})
    p = plan(src, [puller("team-a", "src/cfg"), puller("other", "src/cfg"), ns("team-b")])
    assert p.targets == ("team-a",), "pulled and allowed; pulled but not allowed; not pulling"
    assert kinds(p) == [("create", "team-a")]
    assert p.pullers == ("other", "team-a")


def test_consent_by_label_selector_and_a_source_that_pushes_and_allows_pulls() -> None:
    src = source({REPLICATE_TO: "a", PULL_ALLOWED_MATCHING: "tenant"})
    spaces = [ns("a"), puller("t1", "src/cfg", {"tenant": "x"}), puller("t2", "src/cfg")]
    assert plan(src, spaces).targets == ("a", "t1")


def test_a_source_with_only_pull_allowed_is_a_source_that_pushes_nowhere() -> None:
    src = source({PULL_ALLOWED: "*"})
    assert src.compiled is not None and src.compiled.spec is not None
    assert plan(src, ALL).targets == ()


def test_withdrawn_consent_or_a_removed_entry_removes_the_replica_after_the_grace() -> None:
    allowed = source({PULL_ALLOWED: "t"})
    replica = replica_of(allowed, "t")
    withdrawn = source({PULL_ALLOWED: "other"})
    p = plan(withdrawn, [puller("t", "src/cfg")], [replica], grace=grace_seen(60, 0, {}))
    assert [(a.kind, a.why, a.due_in) for a in p.actions] == [
        ("delete", "namespace no longer targeted", 60)]
    assert kinds(plan(allowed, [ns("t")], [replica])) == [("delete", "t")]


def test_pull_refusals_name_the_entry_and_why() -> None:
    allowed = source({PULL_ALLOWED: "*"}, name="ok")
    closed = source({REPLICATE_TO: "x"}, name="closed")
    broken = source({PULL_ALLOWED: "*", PULL_ALLOWED_MATCHING: "a in (b"}, name="broken")
    plain_cm = plain("src", "plain")
    home = ns("src")
    w = world([allowed, closed, broken, plain_cm], [home])
    pulling = puller("team", "src/ok, src/closed, src/broken, src/plain, src/missing, "
                             "secret/src/tls, bad entry")
    refused = {r.entry: r.reason for r in pull_refusals(pulling, w, SCOPE, ())}
    assert set(refused) == {"src/closed", "src/broken", "src/plain", "src/missing"}
    assert "does not allow namespace team to pull it" in refused["src/closed"]
    assert "invalid spec" in refused["src/broken"]
    assert PULL_ALLOWED_MATCHING in refused["src/broken"]
    assert "is not a source" in refused["src/plain"]
    assert refused["src/missing"] == "there is no ConfigMap src/missing"
    unserved = {r.entry: r.reason for r in unserved_pulls(pulling, frozenset({"ConfigMap"}))}
    assert set(unserved) == {"secret/src/tls", "bad entry"}
    assert "replicates no Secrets" in unserved["secret/src/tls"]
    message = pull_refusals(pulling, w, SCOPE, ())[0].message
    assert message.startswith("configmirror.io/pull entry 'src/broken': ")


def test_a_pulled_secret_must_be_one_of_the_listed_names() -> None:
    tls = cached({"metadata": {"namespace": "src", "name": "tls", "uid": "u",
                               "resourceVersion": "1", "annotations": {PULL_ALLOWED: "*"}},
                  "type": "kubernetes.io/tls", "data": {"tls.crt": "eA==", "tls.key": "eQ=="}},
                 SECRET)
    w = world([tls], [ns("src")], SECRET)
    pulling = puller("team", "secret/src/tls, secret/src/other")
    refused = {r.entry: r.reason for r in pull_refusals(pulling, w, SCOPE, ("tls",))}
    assert set(refused) == {"secret/src/other"}
    assert "named in --secret-names (tls)" in refused["secret/src/other"]
    assert plan_source("src/tls", w, w.get, SCOPE, AT_ONCE).targets == ()
    w = world([tls], [ns("src"), pulling], SECRET)
    assert plan_source("src/tls", w, w.get, SCOPE, AT_ONCE).targets == (
        "team",)


def test_a_namespace_that_never_receives_replicas_is_refused_even_with_consent() -> None:
    src = source({PULL_ALLOWED: "*"})
    w = world([src], [ns("src")])
    for refused_ns in (puller("kube-system", "src/cfg"),
                       puller("quiet", "src/cfg", {"configmirror.io/ignore": "true"}),
                       puller("src", "src/cfg")):
        (refusal,) = pull_refusals(refused_ns, w, SCOPE, ())
        assert "never receives replicas" in refusal.reason


def test_a_plan_shows_content_only_for_a_source_it_acts_on() -> None:
    scope = Scope.from_flags("*", DEFAULT_EXCLUDED, "configmirror.io/source=true")
    assert plan(source({REPLICATE_TO: "a"}), ALL, scope=scope).content is None
    assert plan(source({REPLICATE_TO: "a"}), ALL).content is not None


def test_targets_in_sync_leave_out_the_ones_with_a_write_or_a_conflict_pending() -> None:
    src = source({REPLICATE_TO: "a,b,c,d"})
    stale = replica_of(source({REPLICATE_TO: "a,b,c,d"}, data={"k": "old"}), "b")
    p = plan(src, [*ALL, ns("c"), ns("d")], [replica_of(src, "a"), stale, plain("c")])
    assert p.targets == ("a", "b", "c", "d")
    assert p.targets_in_sync == 1, "a; not b (update), c (conflict) or d (create)"


def test_a_plans_json_gives_each_actions_grace_to_a_tenth_of_a_second() -> None:
    orphan = replica_of(source({REPLICATE_TO: "a"}), "a")
    p = plan(None, ALL, [orphan], grace=grace_seen(60, 1000.0, {"a/cfg": 942.66}))
    assert [a["due_in"] for a in p.to_json()["actions"]] == [2.7]


def test_a_pull_of_a_source_that_is_not_honoured_says_why() -> None:
    src = source({PULL_ALLOWED: "*"})
    pulling = puller("team", "src/cfg")
    selector = Scope.from_flags("*", DEFAULT_EXCLUDED, "configmirror.io/source=true")
    (refused,) = pull_refusals(pulling, world([src], [ns("src")]), selector, ())
    assert "--source-namespace-selector=configmirror.io/source=true" in refused.reason
    (unknown,) = pull_refusals(pulling, world([src], []), SCOPE, ())
    assert unknown.reason == "namespace src is not known yet"
    assert pull_refusals(pulling, world([src], [ns("src")]), SCOPE, ()) == []


def test_only_namespaces_that_pull_this_source_are_its_pullers() -> None:
    src = source({PULL_ALLOWED: "*"})
    p = plan(src, [puller("mine", "src/cfg"), puller("theirs", "src/other"), ns("none")])
    assert p.pullers == ("mine",)

"""What `configmirror status` says of a source and of a namespace (pure: plans over the real
caches, as the command builds them)."""

from __future__ import annotations

import copy

from configmirror.operator.settings import DEFAULT_EXCLUDED
from configmirror.replication.admission import ADMITTED
from configmirror.replication.model import CachedObject, Caches, Namespace
from configmirror.replication.plan import Grace, ReplicationPlan, desired_body, plan_source
from configmirror.replication.spec import PULL_ALLOWED, REPLICATE_TO, Scope
from configmirror.replication.status import (
    Failure,
    KindView,
    Problem,
    namespace_status,
    source_status,
)
from configmirror.vocabulary import CONFIGMAP, SECRET
from configmirror_testing.builders import (
    AT_ONCE,
    SCOPE,
    cached,
    ns,
    plain,
    puller,
    replica_of,
    source,
    world,
)


def view(objects: list[CachedObject], namespaces: list[Namespace], scope: Scope = SCOPE,
         names: tuple[str, ...] = (), grace: Grace = AT_ONCE, caches: Caches | None = None
         ) -> KindView:
    """The view `status` builds: the plan of every source and of every source a replica
    names, over these caches."""
    w = caches or world(objects, namespaces)
    keys = {s.key for s in w.sources()} | set(w.replicated_sources())
    return KindView(w, scope, names, [plan_source(k, w, w.get, scope, grace)
                                      for k in sorted(keys)])


def plan_of(v: KindView, key: str = "src/cfg") -> ReplicationPlan:
    return next(p for p in v.plans if p.source == key)


# -- a source ---------------------------------------------------------------------------------


def test_a_source_counts_its_targets_those_in_sync_and_lists_what_is_pending() -> None:
    src = source({REPLICATE_TO: "a, b, c"})
    v = view([src, replica_of(src, "a"), replica_of(src, "b", data={"k": "edited"})],
             [ns("src"), ns("a"), ns("b"), ns("c")])
    status = source_status(plan_of(v), v, ())
    assert (status.kind, status.source, status.exists, status.targets, status.in_sync) == (
        "ConfigMap", "src/cfg", True, 3, 1)
    assert sorted((p["action"], p["namespace"], p["name"]) for p in status.pending) == [
        ("create", "c", "cfg"), ("update", "b", "cfg")]
    assert not status.done and status.problems == ()


def test_replicas_admission_labelled_or_rewrote_and_marked_count_in_sync() -> None:
    src = source({REPLICATE_TO: "a, b, c"}, data={"k": "v", "mode": "strict"})
    labelled = copy.deepcopy(desired_body(src, "b"))
    labelled["metadata"].update(uid="r-b", resourceVersion="21")
    labelled["metadata"]["labels"]["policy.example/owner"] = "team"
    rewritten = copy.deepcopy(labelled)
    rewritten["metadata"].update(namespace="c", uid="r-c")
    rewritten["data"]["mode"] = "audit"
    rewritten["metadata"]["annotations"][ADMITTED] = "data/mode"
    v = view([src, replica_of(src, "a"), cached(labelled), cached(rewritten)],
             [ns("src"), ns("a"), ns("b"), ns("c")])
    status = source_status(plan_of(v), v, ())
    assert (status.targets, status.in_sync, status.pending) == (3, 3, ()) and status.done
    del rewritten["metadata"]["annotations"][ADMITTED]  # rewritten, but not by admission
    v = view([src, replica_of(src, "a"), cached(labelled), cached(rewritten)],
             [ns("src"), ns("a"), ns("b"), ns("c")])
    assert source_status(plan_of(v), v, ()).in_sync == 2


def test_a_source_in_sync_everywhere_is_done_and_says_so_in_json() -> None:
    src = source({REPLICATE_TO: "a"})
    v = view([src, replica_of(src, "a")], [ns("src"), ns("a")])
    status = source_status(plan_of(v), v, ())
    assert status.done
    assert status.to_json() == {"kind": "ConfigMap", "source": "src/cfg", "exists": True,
                                "targets": 1, "in_sync": 1, "pending": [], "adopting": 0,
                                "problems": []}


def test_a_removal_pending_shows_its_grace_to_a_tenth_of_a_second() -> None:
    src = source({REPLICATE_TO: "a"})
    seen = Grace(60.0, 100.0, lambda key: 99.96)  # its cause was seen 0.04 s ago
    v = view([src, replica_of(src, "a"), replica_of(src, "b")], [ns("src"), ns("a"), ns("b")],
             grace=seen)
    (pending,) = source_status(plan_of(v), v, ()).pending
    assert pending == {"action": "delete", "namespace": "b", "name": "cfg",
                       "why": pending["why"], "due_in": 60.0}
    assert source_status(plan_of(v), v, ()).done, "a removal elsewhere is none of its targets"


def test_a_conflict_is_a_problem_naming_the_object_and_keeps_its_target_out_of_sync() -> None:
    src = source({REPLICATE_TO: "a"})
    v = view([src, plain("a")], [ns("src"), ns("a")])
    status = source_status(plan_of(v), v, ())
    (problem,) = status.problems
    assert (problem.type, problem.object) == ("conflict", "a/cfg")
    assert problem.message == plan_of(v).conflicts[0].message
    assert (status.targets, status.in_sync, status.done) == (1, 0, False)
    assert problem.to_json() == {"type": "conflict", "object": "a/cfg",
                                 "message": problem.message}


def test_an_invalid_source_exists_has_its_problem_and_is_never_done() -> None:
    v = view([source({REPLICATE_TO: "a, ["})], [ns("src"), ns("a")])
    status = source_status(plan_of(v), v, ())
    assert status.exists and status.targets == status.in_sync == 0
    assert [p.type for p in status.problems] == ["invalid"]
    assert "replicate-to" in status.problems[0].message
    assert not status.done


def test_a_source_whose_namespace_may_not_hold_sources_is_never_done() -> None:
    scope = Scope.from_flags("platform", DEFAULT_EXCLUDED)
    v = view([source({REPLICATE_TO: "a"})], [ns("src"), ns("a")], scope=scope)
    status = source_status(plan_of(v), v, ())
    assert [p.type for p in status.problems] == ["not_allowed"]
    assert status.problems[0].message == plan_of(v).not_allowed
    assert status.exists and not status.done


def test_a_deleted_source_with_replicas_left_does_not_exist_and_shows_no_failure() -> None:
    src = source({REPLICATE_TO: "a"})
    v = view([replica_of(src, "a")], [ns("src"), ns("a")])
    status = source_status(plan_of(v), v, [Failure("u-src", "10", "old failure")])
    assert not status.exists and not status.done
    assert [p["action"] for p in status.pending] == ["delete"]
    assert status.problems == ()


def test_an_object_that_is_no_source_does_not_exist_as_one() -> None:
    src = source({REPLICATE_TO: "a"})
    v = view([replica_of(src, "a"), plain("src")], [ns("src"), ns("a")])
    assert not source_status(plan_of(v), v, ()).exists


def test_failures_are_shown_for_the_sources_version_only() -> None:
    src = source({REPLICATE_TO: "a"})  # uid u-src, resourceVersion 10
    v = view([src, replica_of(src, "a")], [ns("src"), ns("a")])
    failures = [Failure("u-src", "10", "now"), Failure("u-src", "9", "an older version"),
                Failure("u-other", "10", "another object")]
    status = source_status(plan_of(v), v, failures)
    assert status.problems == (Problem("failed", "now"),)
    assert status.done, "a failed write is shown; whether it is done is what the caches say"


def test_a_refused_pull_is_a_problem_naming_the_namespace_and_not_a_target() -> None:
    src = source({PULL_ALLOWED: "a"})  # allows a only
    v = view([src], [ns("src"), puller("a", "src/cfg"), puller("b", "src/cfg, src/other")])
    status = source_status(plan_of(v), v, ())
    (refused,) = status.problems
    assert (refused.type, refused.object) == ("pull_refused", "b")
    assert "does not allow namespace b" in refused.message, "only this source's entry"
    assert (status.targets, status.in_sync) == (1, 0)


def test_a_puller_that_is_gone_from_the_cache_is_passed_over() -> None:
    src = source({PULL_ALLOWED: "a"})
    v = view([src], [ns("src"), puller("b", "src/cfg")])
    plan = ReplicationPlan(plan_of(v).kind, "src/cfg", pullers=("gone", "b"))
    assert [p.object for p in source_status(plan, v, ()).problems] == ["b"]


# -- a namespace ------------------------------------------------------------------------------


def test_a_namespace_not_cached_does_not_exist() -> None:
    v = view([], [ns("src")])
    assert namespace_status("nowhere", {"ConfigMap": v}, frozenset({"ConfigMap"})) == {
        "name": "nowhere", "exists": False, "holds": [], "pulls": []}


def test_a_namespace_lists_each_replica_it_holds_sorted_with_its_state() -> None:
    one = source({REPLICATE_TO: "a"}, name="one")
    two = source({REPLICATE_TO: "a"}, name="two")
    three = source({REPLICATE_TO: "a"}, name="three")
    v = view([one, two, three, replica_of(one, "a"), replica_of(two, "a", data={"k": "x"})],
             [ns("src"), ns("a")])
    status = namespace_status("a", {"ConfigMap": v}, frozenset({"ConfigMap"}))
    assert status["exists"] and status["pulls"] == []
    update = next(a for a in plan_of(v, "src/two").actions)
    create = next(a for a in plan_of(v, "src/three").actions)
    assert status["holds"] == [
        {"kind": "ConfigMap", "name": "one", "replica_of": "src/one", "state": "in sync"},
        {"kind": "ConfigMap", "name": "three", "replica_of": "src/three",
         "state": f"pending create ({create.why})"},
        {"kind": "ConfigMap", "name": "two", "replica_of": "src/two",
         "state": f"pending update ({update.why})"}]


def test_a_namespace_holds_only_its_own_replicas() -> None:
    src = source({REPLICATE_TO: "a, b"})
    v = view([src, replica_of(src, "a")], [ns("src"), ns("a"), ns("b")])
    held = namespace_status("a", {"ConfigMap": v}, frozenset({"ConfigMap"}))["holds"]
    assert [(h["name"], h["state"]) for h in held] == [("cfg", "in sync")]


def test_a_namespace_lists_its_pulls_allowed_refused_and_unserved() -> None:
    allowed = source({PULL_ALLOWED: "a"}, name="ok")
    v = view([allowed, source({PULL_ALLOWED: "b"}, name="no")],
             [ns("src"), puller("a", "src/ok, src/no, secret/src/tls")])
    status = namespace_status("a", {"ConfigMap": v}, frozenset({"ConfigMap"}))
    assert status["pulls"][:2] == [
        {"entry": "src/no", "state": "refused",
         "reason": "src/no does not allow namespace a to pull it (its configmirror.io/"
                   "pull-allowed and pull-allowed-matching)"},
        {"entry": "src/ok", "state": "allowed", "reason": ""}]
    assert status["pulls"][2:] == [
        {"entry": "secret/src/tls", "state": "refused",
         "reason": "the operator replicates no Secrets (it runs without --secret-names)"}]


def test_a_namespace_is_found_whichever_kind_caches_it_and_lists_every_kinds_replicas() -> None:
    # Each kind's caches share the Namespace store; here the ConfigMaps' view has none.
    secret = cached({"metadata": {"namespace": "src", "name": "tls", "uid": "s",
                                  "resourceVersion": "3", "annotations": {REPLICATE_TO: "a"}},
                     "type": "Opaque", "data": {"k": "dg=="}}, SECRET)
    secrets = view([secret], [], caches=world([secret], [ns("src"), ns("a")], SECRET))
    configmaps = view([], [], caches=world([], [], CONFIGMAP))
    status = namespace_status("a", {"ConfigMap": configmaps, "Secret": secrets},
                              frozenset({"ConfigMap", "Secret"}))
    assert status["exists"]
    assert [(h["kind"], h["name"]) for h in status["holds"]] == [("Secret", "tls")]

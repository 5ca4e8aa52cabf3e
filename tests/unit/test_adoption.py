"""Adoption: another tool's mirrors, recognised by that tool's own marks, taken over in place
by the one decision (plan.decide), and the one patch that does it."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from pytest_mock import MockerFixture

from configmirror.client.events import EventRecorder
from configmirror.clock import FakeClock
from configmirror.metrics import Metrics
from configmirror.operator.memory import Memory
from configmirror.operator.replicator import Replicator, replicated_message
from configmirror.replication.adoption import RF_REFLECTS, RP_KEYS, adoption_patch, mirror_of
from configmirror.replication.model import DEFAULT_RULES, CachedObject, object_from_json, target_key
from configmirror.replication.plan import decide
from configmirror.replication.spec import ADOPT, DEFAULT_EXCLUDED, REPLICATE_TO, InvalidSpec, Scope
from configmirror.replication.status import KindView, source_status
from configmirror.vocabulary import CONFIGMAP, ROLEBINDING, SECRET
from configmirror_testing import othertools
from configmirror_testing.builders import (
    AT_ONCE,
    SCOPE,
    cached,
    mirror,
    ns,
    plain,
    plan,
    replica_of,
    source,
    world,
)
from configmirror_testing.fakekube import FakeKube

REFLECTOR = "reflector"
REPLICATOR = "kubernetes-replicator"
ADOPTING = Scope.from_flags("*", DEFAULT_EXCLUDED, adopt_from=REFLECTOR)


def adopter(tool: str, **annotations: str) -> CachedObject:
    return source({REPLICATE_TO: "a,b", ADOPT: tool, **annotations})


@pytest.mark.parametrize("tool", [REFLECTOR, REPLICATOR])
def test_a_mirror_with_the_sources_content_is_adopted_by_one_patch(tool: str) -> None:
    src = adopter(tool)
    p = plan(src, [ns("a"), ns("b")], others=[mirror(tool, src, "a")])
    assert [(a.kind, a.namespace, a.adopts) for a in p.actions] == [
        ("adopt", "a", tool), ("create", "b", "")]
    assert not p.conflicts


@pytest.mark.parametrize("tool", [REFLECTOR, REPLICATOR])
def test_a_mirror_whose_content_differs_is_adopted_by_an_update(tool: str) -> None:
    src = adopter(tool)
    p = plan(src, [ns("a")], others=[mirror(tool, src, "a", data={"k": "old"})])
    assert [(a.kind, a.adopts) for a in p.actions] == [("update", tool)]


def test_an_immutable_mirror_whose_content_differs_is_recreated() -> None:
    src = adopter(REFLECTOR)
    p = plan(src, [ns("a")], others=[mirror(REFLECTOR, src, "a", data={"k": "old"},
                                            immutable=True)])
    assert [(a.kind, a.adopts) for a in p.actions] == [("recreate", REFLECTOR)]


def test_a_mirror_of_an_immutable_source_is_adopted_by_the_patch_that_turns_immutable_on(
        ) -> None:
    src = source({REPLICATE_TO: "a", ADOPT: REFLECTOR}, immutable=True)
    assert src.compiled is not None
    found = mirror(REFLECTOR, src, "a")  # neither tool copies `immutable`
    p = plan(src, [ns("a")], others=[found])
    assert [a.kind for a in p.actions] == ["adopt"]
    assert found.mirror is not None
    assert adoption_patch(found.mirror, src.compiled.labels, src.compiled.annotations, True,
                          "30")["immutable"] is True


def test_a_mirror_of_an_immutable_source_whose_content_differs_is_updated_not_recreated(
        ) -> None:
    src = source({REPLICATE_TO: "a", ADOPT: REFLECTOR}, immutable=True)
    p = plan(src, [ns("a")], others=[mirror(REFLECTOR, src, "a", data={"k": "old"})])
    assert [(a.kind, a.adopts) for a in p.actions] == [("update", REFLECTOR)]


@pytest.mark.parametrize("tool", [REFLECTOR, REPLICATOR])
def test_without_adopt_a_mirror_stays_foreign_and_the_conflict_says_how_to_adopt(
        tool: str) -> None:
    src = source({REPLICATE_TO: "a"})
    p = plan(src, [ns("a")], others=[mirror(tool, src, "a")])
    assert not p.actions
    (conflict,) = p.conflicts
    assert conflict.owner is None
    assert f"configmirror.io/adopt: {tool} takes it over" in conflict.message


def test_the_operator_flag_adopts_for_every_source() -> None:
    src = source({REPLICATE_TO: "a"})
    p = plan(src, [ns("a")], others=[mirror(REFLECTOR, src, "a")], scope=ADOPTING)
    assert [(a.kind, a.adopts) for a in p.actions] == [("adopt", REFLECTOR)]


def test_a_sources_own_annotation_wins_over_the_flag() -> None:
    src = adopter(REPLICATOR)
    p = plan(src, [ns("a")], others=[mirror(REFLECTOR, src, "a")], scope=ADOPTING)
    assert not p.actions and len(p.conflicts) == 1


def test_adopting_the_other_tool_leaves_the_mirror_foreign() -> None:
    src = adopter(REPLICATOR)
    p = plan(src, [ns("a")], others=[mirror(REFLECTOR, src, "a")])
    assert not p.actions and p.conflicts[0].owner is None


def test_an_object_without_the_tools_marks_stays_foreign() -> None:
    src = adopter(REFLECTOR)
    p = plan(src, [ns("a")], others=[plain("a")])
    assert not p.actions
    assert "is not a replica" in p.conflicts[0].message


def test_a_reflector_mirror_of_another_source_is_not_adopted() -> None:
    src = adopter(REFLECTOR)
    other = source({REPLICATE_TO: "x"}, namespace="elsewhere")
    p = plan(src, [ns("a")], others=[mirror(REFLECTOR, other, "a")])
    assert not p.actions and p.conflicts[0].owner is None


def test_a_reflector_mirror_goes_to_the_source_it_names_not_the_older_one() -> None:
    named = source({REPLICATE_TO: "a", ADOPT: REFLECTOR}, namespace="young",
                   created="2026-03-01T00:00:00Z")
    older = source({REPLICATE_TO: "a", ADOPT: REFLECTOR}, namespace="old",
                   created="2025-01-01T00:00:00Z")
    w = world([named, older, mirror(REFLECTOR, named, "a")], [ns("a"), ns("young"), ns("old")])
    d = decide("a", "cfg", w.get("a/cfg"), w, SCOPE, AT_ONCE)
    assert d.action is not None and (d.action.kind, d.action.source) == ("adopt", "young/cfg")
    assert [(c.source, c.owner) for c in d.conflicts] == [("old/cfg", "young/cfg")]


def test_a_replicator_copy_two_sources_of_its_name_could_have_made_is_adopted_by_none() -> None:
    one = source({REPLICATE_TO: "a", ADOPT: REPLICATOR}, namespace="one")
    two = source({REPLICATE_TO: "a"}, namespace="two", created="2026-05-01T00:00:00Z")
    w = world([one, two, mirror(REPLICATOR, one, "a")], [ns("a"), ns("one"), ns("two")])
    d = decide("a", "cfg", w.get("a/cfg"), w, SCOPE, AT_ONCE)
    assert d.action is None
    assert sorted(c.source for c in d.conflicts) == ["one/cfg", "two/cfg"]
    assert all("could each have made it" in c.message and c.owner is None
               for c in d.conflicts)


def test_a_replicator_copy_is_adopted_when_the_other_source_of_its_name_does_not_want_it(
        ) -> None:
    one = source({REPLICATE_TO: "a", ADOPT: REPLICATOR}, namespace="one")
    two = source({REPLICATE_TO: "b"}, namespace="two")
    w = world([one, two, mirror(REPLICATOR, one, "a")], [ns("a"), ns("b"), ns("one"), ns("two")])
    d = decide("a", "cfg", w.get("a/cfg"), w, SCOPE, AT_ONCE)
    assert d.action is not None and (d.action.kind, d.action.source) == ("adopt", "one/cfg")


def test_a_replicator_object_holding_keys_of_its_own_is_not_a_mirror() -> None:
    src = adopter(REPLICATOR)
    body = othertools.replicator_copy(
        {"kind": "ConfigMap", "metadata": {"namespace": "src", "name": "cfg",
                                           "resourceVersion": "10"}, "data": {"k": "v"}}, "a")
    body["data"]["mine"] = "x"  # replicated-keys says k: the rest is someone else's
    body["metadata"].update(uid="m", resourceVersion="3")
    p = plan(src, [ns("a")], others=[cached(body)])
    assert not p.actions and p.conflicts[0].owner is None


def test_marks_are_read_as_each_tool_reads_them() -> None:
    assert mirror_of({RF_REFLECTS: "src/cfg"}, ["k"]) == (REFLECTOR, "src/cfg")
    assert mirror_of({RF_REFLECTS: "not a reference"}, ["k"]) is None
    marks = {othertools.RP + "replicated-at": "t", othertools.RP + "replicated-from-version":
             "1", RP_KEYS: "a,b"}
    assert mirror_of(marks, ["b", "a"]) == (REPLICATOR, None)
    assert mirror_of({**marks, othertools.RP + "replicate-from": "src/cfg"}, ["a", "b"]) == (
        REPLICATOR, "src/cfg")
    assert mirror_of({RP_KEYS: "a,b"}, ["a", "b"]) is None  # one mark is not a copy


def test_a_replica_of_ours_is_never_taken_for_a_mirror() -> None:
    src = adopter(REFLECTOR)
    assert replica_of(src, "a").mirror is None


def test_a_bad_adopt_value_is_an_invalid_spec_naming_the_annotation() -> None:
    p = plan(adopter("reflectorr"), [ns("a")])
    assert p.invalid is not None and ADOPT in p.invalid and "reflectorr" in p.invalid


def test_a_bad_adopt_from_flag_names_the_flag() -> None:
    with pytest.raises(InvalidSpec, match="--adopt-from"):
        Scope.from_flags("*", DEFAULT_EXCLUDED, adopt_from="argo")


def _merge(body: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 over the metadata maps, as the API server applies a merge patch."""
    merged = copy.deepcopy(body)
    for field, values in patch["metadata"].items():
        if field == "resourceVersion":
            continue
        into = merged["metadata"].setdefault(field, {})
        for k, v in values.items():
            if v is None:
                into.pop(k, None)
            else:
                into[k] = v
    return merged


@pytest.mark.parametrize("tool", [REFLECTOR, REPLICATOR])
def test_the_patch_makes_the_mirror_a_replica_in_sync_without_their_marks(tool: str) -> None:
    src = source({REPLICATE_TO: "a", ADOPT: tool}, labels={"team": "x"})
    assert src.compiled is not None
    body = {"kind": "ConfigMap", "metadata": {"namespace": "src", "name": "cfg",
                                              "resourceVersion": "10", "labels": {"team": "x"}},
            "data": {"k": "v"}}
    made = (othertools.reflector_mirror(body, "a") if tool == REFLECTOR
            else othertools.replicator_copy(body, "a"))
    made["metadata"].update(uid="m", resourceVersion="3")
    found = cached(made).mirror
    assert found is not None
    patch = adoption_patch(found, src.compiled.labels, src.compiled.annotations, False, "3")
    assert patch["metadata"]["resourceVersion"] == "3" and "data" not in patch
    adopted = object_from_json(_merge(made, patch), DEFAULT_RULES, CONFIGMAP)
    assert adopted.replica_of == "src/cfg" and adopted.mirror is None
    assert adopted.content_hash == src.compiled.content_hash
    left = [k for k in _merge(made, patch)["metadata"]["annotations"]
            if k.startswith(othertools.marks(tool))]
    assert left == []


def test_run_adopts_with_one_merge_patch_keeping_the_object(mocker: MockerFixture) -> None:
    src = adopter(REFLECTOR)
    found = mirror(REFLECTOR, src, "a")
    w = world([src, found], [ns("a"), ns("b"), ns("src")])
    kube = FakeKube()
    raw = othertools.reflector_mirror({"kind": "ConfigMap", "metadata": {
        "namespace": "src", "name": "cfg", "resourceVersion": "10"}, "data": {"k": "v"}}, "a")
    raw["metadata"].update(uid="m-a", resourceVersion="30")
    kube.objects["a/cfg"] = raw
    recorder = mocker.create_autospec(EventRecorder, instance=True)
    metrics = Metrics()
    r = Replicator(kube, w, SCOPE, recorder,  # type: ignore[arg-type]
                   Memory(lambda key: 0, 60.0, FakeClock()), metrics=metrics)
    assert r.reconcile(target_key(CONFIGMAP, "a", "cfg")).changed
    ((verb, _, body, _),) = kube.written()
    assert verb == "patch" and body["metadata"]["resourceVersion"] == "30"
    stored = kube.objects["a/cfg"]
    assert stored["metadata"]["uid"] == "m-a"
    assert not [k for k in stored["metadata"]["annotations"] if k.startswith(othertools.RF)]
    ((_, reason, action, namespace, _),) = [c.args for c in recorder.tally.call_args_list]
    assert (reason, action, namespace) == ("Replicated", "adopted", "a")
    assert metrics.registry.get_sample_value("configmirror_replica_writes_total", {
        "action": "adopt", "resource": "configmaps"}) == 1


def test_the_replicated_event_counts_adoptions() -> None:
    assert replicated_message({"created": 1, "adopted": 3}) == (
        "created 1, updated 0, deleted 0, adopted 3 replicas")


def test_status_counts_the_adoptions_pending() -> None:
    src = adopter(REFLECTOR)
    w = world([src, mirror(REFLECTOR, src, "a")], [ns("a"), ns("b"), ns("src")])
    p = plan(src, [ns("a"), ns("b")], others=[mirror(REFLECTOR, src, "a")])
    status = source_status(p, KindView(w, SCOPE, ()), [])
    assert status.adopting == 1 and not status.done
    assert status.to_json()["pending"][0]["adopts"] == REFLECTOR


@pytest.mark.parametrize("tool", [REFLECTOR, REPLICATOR])
def test_a_secrets_mirror_is_adopted_when_data_and_type_are_the_sources(tool: str) -> None:
    body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"namespace": "src", "name": "tls", "uid": "u", "resourceVersion": "7",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {REPLICATE_TO: "a,b", ADOPT: tool}},
            "data": {"tls.crt": "Y3J0", "tls.key": "a2V5"}}
    made = (othertools.reflector_mirror if tool == REFLECTOR else othertools.replicator_copy)
    same, other = made(body, "a"), made({**body, "type": "Opaque"}, "b")
    for m in (same, other):
        m["metadata"].update(uid="m", resourceVersion="9")
    src = cached(body, SECRET)
    w = world([src, cached(same, SECRET), cached(other, SECRET)], [ns("a"), ns("b"), ns("src")],
              SECRET)
    adopted = decide("a", "tls", w.get("a/tls"), w, SCOPE, AT_ONCE)
    retyped = decide("b", "tls", w.get("b/tls"), w, SCOPE, AT_ONCE)
    assert adopted.action is not None and adopted.action.kind == "adopt"
    # A Secret's type cannot change in place: a mirror of another type is recreated.
    assert retyped.action is not None and (retyped.action.kind, retyped.action.adopts) == (
        "recreate", tool)


def test_a_rolebinding_mirror_with_the_sources_roleref_is_updated_and_another_recreated() -> None:
    # A RoleBinding's roleRef cannot change in place (Kind.fixed): a mirror (another tool's
    # marks) whose subjects differ but whose roleRef is the source's is updated; one bound to
    # another role is recreated. The fixed field is the kind's, not a Secret's `type`, and a
    # payload without `immutable` (every kind but ConfigMap and Secret) is read as mutable.
    rules = dataclasses.replace(DEFAULT_RULES, bindable_roles=frozenset({"view", "edit"}))
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    subjects = [{"kind": "Group", "name": "readers", "apiGroup": "rbac.authorization.k8s.io"}]

    def binding(namespace: str, annotations: dict[str, str], role_ref: dict[str, str],
                members: list[dict[str, str]]) -> CachedObject:
        return object_from_json({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"namespace": namespace, "name": "readers", "uid": f"u-{namespace}",
                         "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": annotations},
            "roleRef": role_ref, "subjects": members}, rules, ROLEBINDING)

    marks = {RF_REFLECTS: "src/readers"}
    src = binding("src", {REPLICATE_TO: "a,b", ADOPT: REFLECTOR}, ref, subjects)
    same, other = binding("a", marks, ref, []), binding("b", marks, {**ref, "name": "edit"},
                                                         subjects)
    assert same.mirror is not None and not same.mirror.immutable
    w = world([src, same, other], [ns("a"), ns("b"), ns("src")], ROLEBINDING)
    updated = decide("a", "readers", w.get("a/readers"), w, SCOPE, AT_ONCE)
    rebound = decide("b", "readers", w.get("b/readers"), w, SCOPE, AT_ONCE)
    assert updated.action is not None and (updated.action.kind, updated.action.adopts) == (
        "update", REFLECTOR)
    assert rebound.action is not None and (rebound.action.kind, rebound.action.adopts) == (
        "recreate", REFLECTOR)

"""The replicator's memory between reconciles: what it tells once, what it calls off, and
what it never writes (pure logic: configmirror_testing's FakeKube as the server, a mocked
recorder, the real caches)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pytest_mock import MockerFixture

from configmirror.client.events import EventRecorder
from configmirror.client.kube import ApiError
from configmirror.client.store import Store
from configmirror.clock import FakeClock
from configmirror.controller.reconcile import Result, RetryableError, TerminalError
from configmirror.metrics import Metrics
from configmirror.operator.memory import Memory
from configmirror.operator.replicator import (
    MUTATED,
    PULL_NOT_ALLOWED,
    REPLICATED,
    Replicator,
)
from configmirror.operator.settings import DEFAULT_EXCLUDED
from configmirror.replication.admission import ADMITTED
from configmirror.replication.model import (
    REPLICA_OF,
    CachedObject,
    Caches,
    Namespace,
    object_indexers,
    pull_key,
    source_key,
    target_key,
)
from configmirror.replication.plan import desired_body
from configmirror.replication.spec import ON_DELETE, PULL_ALLOWED, REPLICATE_TO, Scope
from configmirror.vocabulary import CONFIGMAP, SECRET, Kind
from configmirror_testing.builders import cached, ns, plain, puller, replica_body, source
from configmirror_testing.fakekube import Admission, FakeKube, adds_labels, sets_data

TARGET = target_key(CONFIGMAP, "a", "cfg")
SOURCE = source_key(CONFIGMAP, "src", "cfg")


class World:
    """The server (FakeKube, its first write at resourceVersion 30, with `admission` per
    namespace) and the caches a replicator reads, filled by hand as an informer would."""

    def __init__(self, *namespaces: Namespace, kind: Kind = CONFIGMAP,
                 admission: dict[str, Admission] | None = None) -> None:
        self.objects: Store[CachedObject] = Store(object_indexers())
        self.namespaces: Store[Namespace] = Store()
        for namespace in (ns("src"), *namespaces):
            self.namespaces.upsert(namespace.name, namespace)
        self.caches = Caches(self.objects, self.namespaces, kind)
        self.kind = kind
        self.kube = FakeKube(resource=kind.plural, revision=29, admission=admission or {})

    def put(self, obj: CachedObject) -> CachedObject:
        """Cache `obj` only (a source, or what the server no longer holds as cached)."""
        self.objects.upsert(obj.key, obj)
        return obj

    def hold(self, body: dict[str, Any]) -> CachedObject:
        """An object the server stores and the caches hold."""
        meta = body["metadata"]
        self.kube.objects[f"{meta['namespace']}/{meta['name']}"] = copy.deepcopy(body)
        return self.put(cached(body, self.kind))


def replica(world: World, src: CachedObject, namespace: str, rv: str = "20",
            **edits: Any) -> CachedObject:
    """A replica of `src` the server holds and the caches hold (optionally hand-edited)."""
    return world.hold(replica_body(src, namespace, rv, **edits))


def replicator(mocker: MockerFixture, world: World, delete_grace: float = 60.0,
               dry_run: bool = False, watermark: int = 0, metrics: Metrics | None = None
               ) -> tuple[Replicator, FakeKube, Any]:
    """`watermark`: the resourceVersion the caches are at (0: behind every write of ours,
    which the replicator then sees as it wrote it; high: the cache is the truth)."""
    kube = world.kube
    recorder = mocker.create_autospec(EventRecorder, instance=True)
    r = Replicator(kube, world.caches, Scope.from_flags("*", DEFAULT_EXCLUDED), recorder,
                   Memory(lambda key: watermark, delete_grace, FakeClock()), metrics=metrics,
                   dry_run=dry_run)
    return r, kube, recorder


def deleter(mocker: MockerFixture, world: World) -> tuple[Replicator, FakeKube, Metrics]:
    """A replicator with no grace, so a replica whose source is gone is deleted (or
    released) at once, and its metrics."""
    metrics = Metrics()
    r, kube, _ = replicator(mocker, world, delete_grace=0.0, metrics=metrics)
    return r, kube, metrics


# -- removals: they wait, and are called off once their cause goes -----------------------------


def test_a_removal_waits_out_the_grace_and_is_called_off_when_its_source_comes_back(
        mocker: MockerFixture) -> None:
    world = World(ns("a"))
    src = source({REPLICATE_TO: "a"})
    replica(world, src, "a")  # its source is gone
    r, kube, _ = replicator(mocker, world, delete_grace=60.0)
    result = r.reconcile(TARGET)
    assert result.requeue_after == 60
    assert r.pending_removals() == 1 and not kube.requests
    world.put(src)  # back, before the grace is out
    r.reconcile(SOURCE)
    assert r.pending_removals() == 0, "called off by the source's reconcile, not later"


def test_a_removal_whose_cause_remains_stays_pending_through_its_sources_reconcile(
        mocker: MockerFixture) -> None:
    world = World(ns("a"), ns("b"))
    src = source({REPLICATE_TO: "a"})
    replica(world, src, "a")
    world.put(source({REPLICATE_TO: "b"}))  # it no longer wants a
    r, _, _ = replicator(mocker, world, delete_grace=60.0)
    r.reconcile(TARGET)
    r.reconcile(SOURCE)
    assert r.pending_removals() == 1


def test_a_removal_whose_cause_is_gone_is_forgotten_by_its_target_too(
        mocker: MockerFixture) -> None:
    world = World(ns("a"))
    src = source({REPLICATE_TO: "a"})
    replica(world, src, "a")
    r, kube, _ = replicator(mocker, world, delete_grace=60.0)
    r.reconcile(TARGET)
    world.put(src)
    assert r.reconcile(TARGET) == Result() and r.pending_removals() == 0
    assert not kube.requests


def test_a_removal_due_in_under_a_second_still_waits(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    replica(world, source({REPLICATE_TO: "a"}), "a")
    r, kube, _ = replicator(mocker, world, delete_grace=0.5)
    result = r.reconcile(TARGET)
    assert result.requeue_after == 0.5
    assert not kube.requests


# -- writes: none in a dry run, each told in its source's tally -----------------------------------


def test_a_dry_run_decides_but_writes_nothing(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    world.put(source({REPLICATE_TO: "a"}))
    r, kube, recorder = replicator(mocker, world, dry_run=True)
    assert r.reconcile(TARGET) == Result()
    assert not kube.requests and not recorder.method_calls


def test_a_write_is_counted_in_its_sources_replicated_tally(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    src = world.put(source({REPLICATE_TO: "a"}))
    r, kube, recorder = replicator(mocker, world)
    assert r.reconcile(TARGET) == Result(changed=True)
    assert kube.objects["a/cfg"]["data"] == desired_body(src, "a")["data"]
    assert recorder.tally.call_count == 1
    ref, reason, kind, item, _ = recorder.tally.call_args.args
    assert (ref.namespace, ref.name, reason, kind, item) == ("src", "cfg", REPLICATED,
                                                              "created", "a")


def test_an_immutable_replica_that_differs_is_deleted_then_created(
        mocker: MockerFixture) -> None:
    world = World(ns("a"))
    src = world.put(source({REPLICATE_TO: "a"}))
    replica(world, src, "a", immutable=True, data={"k": "old"})
    r, kube, _ = replicator(mocker, world)
    assert r.reconcile(TARGET) == Result(changed=True)
    assert kube.verbs() == ["delete", "create"]
    assert kube.objects["a/cfg"]["data"] == desired_body(src, "a")["data"]


def test_a_write_admission_adds_a_label_to_is_written_once_and_needs_no_mark(
        mocker: MockerFixture) -> None:
    world = World(ns("a"), admission={"a": adds_labels({"o": "t"})})
    world.put(source({REPLICATE_TO: "a"}))
    r, kube, recorder = replicator(mocker, world)
    assert r.reconcile(TARGET) == Result(changed=True)
    assert r.reconcile(TARGET) == Result(), "what the server stored is in sync"
    assert kube.verbs() == ["create"]
    (warned,) = [c.args[2] for c in recorder.warning.call_args_list if c.args[1] == MUTATED]
    assert warned.startswith("the API server stored replica a/cfg other than it was written "
                             "(label o added)")


def test_a_data_key_admission_rewrites_is_named_on_the_replica_once_then_carried(
        mocker: MockerFixture) -> None:
    world = World(ns("a"), admission={"a": sets_data({"k": "policy"})})
    world.put(source({REPLICATE_TO: "a"}, data={"k": "1"}))
    metrics = Metrics()
    r, kube, _ = replicator(mocker, world, watermark=10**9,  # each write's echo is cached
                            metrics=metrics)
    r.reconcile(TARGET)
    assert kube.verbs() == ["create", "patch"]
    assert kube.requests[-1].body["metadata"] == {
        "resourceVersion": "30", "annotations": {ADMITTED: "data/k"}}, \
        "the mark, on the version just written"
    assert metrics.registry.get_sample_value(
        "configmirror_replica_writes_total", {"action": "admitted", "resource": "configmaps"}
    ) == 1, "the mark is a write, and counted as one"
    world.put(cached(kube.objects["a/cfg"]))  # the watch brings what the server stored
    assert r.reconcile(TARGET) == Result(), "in sync as the server stores it"
    world.put(source({REPLICATE_TO: "a"}, data={"k": "2"}, rv="11"))
    kube.forget()
    r.reconcile(TARGET)
    assert kube.verbs() == ["update"], "a source edit is one write: it carries the mark"
    assert kube.requests[-1].body["metadata"]["annotations"][ADMITTED] == "data/k"


def test_a_mark_admission_no_longer_needs_is_taken_off(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    src = world.put(source({REPLICATE_TO: "a"}, data={"k": "1"}))
    marked = replica_body(src, "a", data={"k": "policy"})  # as a policy left it, and marked
    marked["metadata"]["annotations"][ADMITTED] = "data/k"
    world.hold(marked)
    world.put(source({REPLICATE_TO: "a"}, data={"k": "2"}, rv="11"))
    r, kube, _ = replicator(mocker, world)  # the policy is gone: the server stores as sent
    r.reconcile(TARGET)
    assert kube.verbs() == ["update", "patch"]
    assert kube.requests[-1].body["metadata"]["annotations"] == {ADMITTED: None}
    assert ADMITTED not in kube.objects["a/cfg"]["metadata"]["annotations"]
    assert r.reconcile(TARGET) == Result()


def test_a_secret_written_and_changed_before_the_watch_brings_it_is_updated_not_recreated(
        mocker: MockerFixture) -> None:
    world = World(ns("a"), kind=SECRET)

    def secret(data: str, rv: str) -> CachedObject:
        return world.put(cached({"metadata": {
            "namespace": "src", "name": "cfg", "uid": "u", "resourceVersion": rv,
            "annotations": {REPLICATE_TO: "a"}}, "type": "Opaque", "data": {"k": data}}, SECRET))

    secret("MQ==", "10")
    kube = world.kube
    r = Replicator(kube, world.caches, Scope.from_flags("src", DEFAULT_EXCLUDED),
                   mocker.create_autospec(EventRecorder, instance=True),
                   Memory(lambda key: 0, 60.0, FakeClock()))
    r.reconcile(target_key(SECRET, "a", "cfg"))
    secret("Mg==", "11")  # the replica is still only in our memory of the write
    r.reconcile(target_key(SECRET, "a", "cfg"))
    assert kube.verbs() == ["create", "update"]
    assert kube.objects["a/cfg"]["data"] == {"k": "Mg=="}


def test_a_release_is_a_merge_patch_of_our_marks_and_is_counted(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    replica(world, source({REPLICATE_TO: "a", ON_DELETE: "retain"}), "a")  # source gone
    r, kube, metrics = deleter(mocker, world)
    assert r.reconcile(TARGET) == Result(changed=True)
    (verb, path, body, options), = kube.requests
    assert (verb, path, options["content_type"]) == (
        "patch", "/api/v1/namespaces/a/configmaps/cfg", "application/merge-patch+json")
    assert body["metadata"]["resourceVersion"] == "20", "on the version planned from"
    assert REPLICA_OF not in kube.objects["a/cfg"]["metadata"]["annotations"]
    assert metrics.registry.get_sample_value(
        "configmirror_replica_writes_total", {"action": "release", "resource": "configmaps"}) == 1
    r.reconcile(TARGET)  # before the watch brings it: the cache still holds our replica
    assert len(kube.requests) == 1, "released once: our memory of it says it is no replica"


def test_a_create_into_a_namespace_found_terminating_is_skipped_quietly(
        mocker: MockerFixture) -> None:
    world = World(ns("a"))
    world.put(source({REPLICATE_TO: "a"}))
    r, kube, recorder = replicator(mocker, world)
    kube.failures.append(ApiError(
        403, "Forbidden", 'unable to create new content in namespace a because it is being '
        'terminated', "create", "/api/v1/namespaces/a/configmaps"))
    assert r.reconcile(TARGET) == Result()
    assert not recorder.warning.called
    assert "a/cfg" not in kube.objects


def test_an_admission_change_is_warned_once_per_digest_and_again_once_it_was_no_source(
        mocker: MockerFixture) -> None:
    webhook = adds_labels({"webhook": "added"})  # a webhook adds a label to each replica
    world = World(ns("a"), ns("b"), ns("c"), admission=dict.fromkeys("abc", webhook))
    src = world.put(source({REPLICATE_TO: "a, b, c"}))
    r, _, recorder = replicator(mocker, world)

    def warned() -> int:
        return sum(1 for c in recorder.warning.call_args_list if c.args[1] == MUTATED)

    r.reconcile(TARGET)
    r.reconcile(SOURCE)  # still a source: nothing to forget
    r.reconcile(target_key(CONFIGMAP, "b", "cfg"))
    assert warned() == 1, "once for that digest of the source"
    world.put(plain("src"))  # no longer a source
    r.reconcile(SOURCE)
    world.put(src)  # a source again, with the same digest
    r.reconcile(target_key(CONFIGMAP, "c", "cfg"))
    assert warned() == 2


# -- problems and refusals: told once per change -----------------------------------------------


def test_a_sources_problem_is_warned_once_per_version(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    world.put(source({REPLICATE_TO: "a, ["}))
    r, _, recorder = replicator(mocker, world)
    r.reconcile(SOURCE)
    r.reconcile(SOURCE)  # a resync: the same version
    assert recorder.warning.call_count == 1
    world.put(source({REPLICATE_TO: "a, [["}, rv="11"))
    r.reconcile(SOURCE)
    assert recorder.warning.call_count == 2


def conflicts(recorder: Any) -> int:
    return sum(1 for c in recorder.warning.call_args_list if c.args[1] == "TargetConflict")


def test_a_conflict_is_warned_once_and_again_when_it_comes_back(mocker: MockerFixture) -> None:
    world = World(ns("a"), ns("b"))
    world.put(plain("a"))  # someone's own object where the replica would go
    world.put(source({REPLICATE_TO: "a"}))
    r, kube, recorder = replicator(mocker, world)
    r.reconcile(TARGET)
    r.reconcile(TARGET)  # a resync: the same conflict
    assert conflicts(recorder) == 1
    world.put(source({REPLICATE_TO: "b"}, rv="11"))  # it no longer wants a: no conflict
    r.reconcile(TARGET)
    world.put(source({REPLICATE_TO: "a"}, rv="12"))  # the same conflict again
    r.reconcile(TARGET)
    assert conflicts(recorder) == 2
    assert not kube.requests, "someone's own object is never written"


def test_a_dry_run_tells_no_conflict(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    world.put(plain("a"))
    world.put(source({REPLICATE_TO: "a"}))
    r, _, recorder = replicator(mocker, world, dry_run=True)
    r.reconcile(TARGET)
    assert conflicts(recorder) == 0


def refusals(recorder: Any) -> int:
    return sum(1 for c in recorder.warning.call_args_list if c.args[1] == PULL_NOT_ALLOWED)


def test_a_pull_refused_again_after_it_was_served_is_warned_again(
        mocker: MockerFixture) -> None:
    world = World(puller("a", "src/cfg"))
    r, _, recorder = replicator(mocker, world)
    key = pull_key(CONFIGMAP, "a")
    r.reconcile(key)  # no such source
    world.put(source({PULL_ALLOWED: "a"}))
    r.reconcile(key)  # served
    assert refusals(recorder) == 1
    world.objects.delete("src/cfg")
    r.reconcile(key)
    assert refusals(recorder) == 2


def test_a_namespace_deleted_and_made_again_is_told_its_refused_pull_again(
        mocker: MockerFixture) -> None:
    world = World(puller("a", "src/cfg"))
    r, _, recorder = replicator(mocker, world)
    key = pull_key(CONFIGMAP, "a")
    r.reconcile(key)
    world.namespaces.delete("a")
    assert r.reconcile(key) == Result()
    world.namespaces.upsert("a", puller("a", "src/cfg"))
    r.reconcile(key)
    assert refusals(recorder) == 2


# -- deletes: done once, counted, and only what is already gone is taken as done -------------


def deletes(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value(
        "configmirror_replica_writes_total", {"action": "delete", "resource": "configmaps"})


def test_an_orphan_is_deleted_at_its_version_counted_and_not_deleted_again_before_the_watch(
        mocker: MockerFixture) -> None:
    world = World(ns("a"))
    replica(world, source({REPLICATE_TO: "a"}), "a", rv="20")  # its source is gone
    r, kube, metrics = deleter(mocker, world)
    assert r.reconcile(TARGET) == Result(changed=True)
    (verb, path, body, _), = kube.requests
    assert (verb, path) == ("delete", "/api/v1/namespaces/a/configmaps/cfg")
    assert body["preconditions"] == {"resourceVersion": "20"}
    assert "a/cfg" not in kube.objects
    assert deletes(metrics) == 1
    assert r.reconcile(TARGET) == Result(), "the cache still holds it: our memory says gone"
    assert len(kube.requests) == 1


def test_a_delete_of_what_is_already_gone_is_done(mocker: MockerFixture) -> None:
    world = World(ns("a"))
    replica(world, source({REPLICATE_TO: "a"}), "a")
    r, kube, metrics = deleter(mocker, world)
    del kube.objects["a/cfg"]  # gone from the server, still in the cache: the delete gets 404
    assert r.reconcile(TARGET) == Result(changed=True)
    assert kube.verbs() == ["delete"]
    assert deletes(metrics) == 1


def test_a_delete_refused_for_a_newer_version_is_retried_and_not_counted(
        mocker: MockerFixture) -> None:
    world = World(ns("a"))
    replica(world, source({REPLICATE_TO: "a"}), "a")
    r, kube, metrics = deleter(mocker, world)
    kube.objects["a/cfg"]["metadata"]["resourceVersion"] = "25"  # edited since it was cached
    with pytest.raises(RetryableError, match="delete ConfigMap a/cfg"):
        r.reconcile(TARGET)
    assert not deletes(metrics)
    assert "a/cfg" in kube.objects


def test_a_failed_delete_of_an_orphan_is_an_error_with_no_source_to_tell(
        mocker: MockerFixture) -> None:
    world = World(ns("a"))
    replica(world, source({REPLICATE_TO: "a"}), "a")
    r, kube, _ = deleter(mocker, world)
    kube.failures.append(ApiError(403, "Forbidden", "denied by policy", "delete",
                                  "/api/v1/namespaces/a/configmaps/cfg"))
    with pytest.raises(TerminalError, match="delete ConfigMap a/cfg forbidden: denied by policy"):
        r.reconcile(TARGET)

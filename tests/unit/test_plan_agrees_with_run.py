"""`plan` says what `run` does: random worlds, planned once, then run to the end.

Each world has several sources per name (with creation times that tie and that do not),
invalid ones, sources in namespaces that may not push, sources that retain their replicas or
sync them once, leftovers of deleted sources, foreign objects, mirrors kubernetes-reflector
and kubernetes-replicator made (of a source there or gone, with its content or stale; some
sources adopt from one tool or the other), replicas in every state (in
sync, stale, edited by hand, without their hash mark), and namespaces in every state
(labelled, ignored, terminating, absent), and a delete grace of 0 or 30 s. Some namespaces
have admission that changes every replica written there (a policy that adds a label, or one
that rewrites a data key), and replicas already as such admission left them (labelled, or
rewritten and marked). `plan` lists its actions and problems from one look at the caches.
Then the workers run: the real work queue on a fake clock (stepped to the next due key
whenever only delayed keys are left), the real routing of watch events and the real
replicator, writing to configmirror_testing's FakeKube, which stores what it is sent (as its
admission changes it) with the API server's resourceVersion preconditions; its stored
objects go back into the caches as a relist does, round after round, until nothing more is
written. Every write, conflict and problem the run made is then compared with what `plan`
listed, object by object (and the one patch that names a rewritten key on a replica the
first time, which plan cannot know of), a second `plan` lists nothing left to do, and a
restarted operator (no memory, a fresh list) writes nothing.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from configmirror.client.events import ClusterRecorder
from configmirror.client.store import Store
from configmirror.clock import FakeClock
from configmirror.controller.reconcile import ReconcileError
from configmirror.controller.workqueue import WorkQueue
from configmirror.operator.memory import Memory
from configmirror.operator.replicator import MUTATED, Replicator
from configmirror.replication.admission import ADMITTED
from configmirror.replication.clusters import MEMBER_NAMESPACE, MemberCaches, for_cluster
from configmirror.replication.model import (
    CONTENT_HASH,
    DEFAULT_RULES,
    REPLICA_OF,
    SOURCE,
    CachedObject,
    Caches,
    Key,
    Namespace,
    namespace_from_json,
    object_from_json,
    object_indexers,
    source_key,
    target_key,
)
from configmirror.replication.plan import (
    REMOVALS,
    Grace,
    decide,
    desired_body,
    plan_source,
    pull_refusals,
    unserved_pulls,
    wants,
)
from configmirror.replication.routing import namespace_keys, object_keys, resync_keys
from configmirror.replication.spec import (
    ADOPT,
    ON_DELETE,
    PULL,
    PULL_ALLOWED,
    PULL_ALLOWED_MATCHING,
    REPLICATE_TO,
    REPLICATE_TO_CLUSTERS,
    REPLICATE_TO_CLUSTERS_MATCHING,
    REPLICATE_TO_MATCHING,
    SOURCE_ANNOTATIONS,
    SOURCE_CLUSTER,
    SYNC,
    Scope,
)
from configmirror.vocabulary import CONFIGMAP
from configmirror_testing import othertools
from configmirror_testing.builders import cached
from configmirror_testing.fakekube import FakeKube, adds_labels, sets_data

NAMESPACES = ("a", "b", "c", "d", "home1", "home2")
NAMES = ("cfg", "app")
TIMES = ("2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2026-02-01T00:00:00Z")
TARGETING = ({}, {REPLICATE_TO: "*"}, {REPLICATE_TO: "a,b"}, {REPLICATE_TO: "*,!c"},
             {REPLICATE_TO_MATCHING: "env=prod"},
             {REPLICATE_TO: "d", REPLICATE_TO_MATCHING: "env in (prod,dev)"},
             {REPLICATE_TO: "a,team-["},  # invalid: changes nothing
             {REPLICATE_TO_MATCHING: "env in (prod"})  # invalid
CONSENTS = ({}, {}, {PULL_ALLOWED: "*"}, {PULL_ALLOWED: "a,b"}, {PULL_ALLOWED_MATCHING: "env=dev"})
PULLS = ("", "", "home1/cfg", "home2/app, home1/cfg", "a/cfg, home9/cfg", "secret/home1/cfg",
         "not an entry, home2/cfg")
LIFECYCLES = ({}, {}, {ON_DELETE: "retain"}, {SYNC: "once"}, {ON_DELETE: "retain", SYNC: "once"},
              {ON_DELETE: "keep"})  # the last is invalid
ADOPTIONS = ({}, {ADOPT: "reflector"}, {ADOPT: "kubernetes-replicator"})
SCOPE = Scope.from_flags("*", "kube-*", "push!=no")
START = 1000.0  # the fake clock's time when the run starts


@dataclass
class World:
    namespaces: dict[str, dict[str, Any]]
    objects: dict[str, dict[str, Any]]  # "ns/name" -> the stored object
    grace: float = 0.0                  # --delete-grace
    # namespace -> what admission does to each write there: "label" (adds one), "data"
    # (rewrites data key k); absent: nothing
    admission: dict[str, str] = field(default_factory=dict)


# What each admission of World.admission does to a write (FakeKube's admission).
ADMISSIONS = {"label": adds_labels({"policy.example/owner": "team"}),
              "data": sets_data({"k": "policy"})}


def admitted(body: dict[str, Any], admission: str) -> dict[str, Any]:
    """`body` as the server's admission stores it."""
    ADMISSIONS[admission](body)
    return body


def source_body(namespace: str, name: str, targeting: dict[str, str], data: str,
                created: str, immutable: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": namespace, "name": name, "uid": f"u-{namespace}-{name}",
                     "resourceVersion": "1", "creationTimestamp": created,
                     "annotations": dict(targeting), "labels": {"team": data}},
        "data": {"k": data}}
    if immutable:
        body["immutable"] = True
    return body


@st.composite
def worlds(draw: st.DrawFn) -> World:
    namespaces: dict[str, dict[str, Any]] = {}
    for name in NAMESPACES:
        if name.startswith("home") or draw(st.booleans()) or name == "a":
            labels = {}
            if draw(st.booleans()):
                labels["env"] = draw(st.sampled_from(["prod", "dev"]))
            if not name.startswith("home") and draw(st.integers(0, 5)) == 0:
                labels["configmirror.io/ignore"] = "true"
            if draw(st.integers(0, 4)) == 0:
                labels["push"] = "no"  # may hold no sources (SCOPE's selector)
            meta: dict[str, Any] = {"name": name, "labels": labels, "resourceVersion": "1",
                                    "uid": f"n-{name}"}
            if pull := draw(st.sampled_from(PULLS)):
                meta["annotations"] = {PULL: pull}
            raw: dict[str, Any] = {"metadata": meta}
            if not name.startswith("home") and draw(st.integers(0, 5)) == 0:
                meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                raw["status"] = {"phase": "Terminating"}
            namespaces[name] = raw

    objects: dict[str, dict[str, Any]] = {}
    everything: list[dict[str, Any]] = []  # every source, the deleted ones too
    for name in NAMES:
        for home in ("home1", "home2", "a"):
            if home not in namespaces or not draw(st.booleans()):
                continue
            targeting = {**draw(st.sampled_from(TARGETING)), **draw(st.sampled_from(CONSENTS)),
                         **draw(st.sampled_from(LIFECYCLES)), **draw(st.sampled_from(ADOPTIONS))}
            body = source_body(home, name, targeting,
                               draw(st.sampled_from(["x", "y"])), draw(st.sampled_from(TIMES)),
                               draw(st.integers(0, 5)) == 0)
            everything.append(body)
            if draw(st.integers(0, 3)) > 0:  # else: deleted, its replicas may be left
                objects[f"{home}/{name}"] = body

    for namespace in namespaces:
        for name in NAMES:
            key = f"{namespace}/{name}"
            if key in objects:
                continue
            occupant = draw(st.sampled_from(["none", "none", "replica", "replica", "foreign",
                                             "reflector", "kubernetes-replicator"]))
            if occupant == "foreign":
                objects[key] = {"metadata": {"namespace": namespace, "name": name,
                                             "uid": f"f-{key}", "resourceVersion": "1"},
                                "data": {"mine": "1"}}
                continue
            owners = [s for s in everything if s["metadata"]["name"] == name
                      and s["metadata"]["namespace"] != namespace]
            if occupant == "none" or not owners:
                continue
            owner = draw(st.sampled_from(owners))
            if occupant in ("reflector", "kubernetes-replicator"):
                # As that tool writes it (othertools), of a source there or gone.
                origin = copy.deepcopy(owner)
                if draw(st.booleans()):
                    origin["data"] = {"k": "old"}
                made = (othertools.reflector_mirror(origin, namespace)
                        if occupant == "reflector"
                        else othertools.replicator_copy(origin, namespace))
                made["metadata"].update(uid=f"m-{key}", resourceVersion="1")
                objects[key] = made
                continue
            if not set(SOURCE_ANNOTATIONS) & set(owner["metadata"]["annotations"]):
                continue  # never a source: it has no replicas
            state = draw(st.sampled_from(["in sync", "stale", "edited", "no hash", "labelled",
                                          "marked"]))
            origin = copy.deepcopy(owner)
            if state == "stale":
                origin["data"] = {"k": "old"}
            replica = copy.deepcopy(desired_body(cached(origin), namespace))
            replica["metadata"].update(uid=f"r-{key}", resourceVersion="1")
            if state == "edited":
                replica["data"] = {"k": "by hand"}
            elif state == "no hash":
                del replica["metadata"]["annotations"][CONTENT_HASH]
            elif state == "labelled":  # as a policy that labels replicas left it
                admitted(replica, "label")
            elif state == "marked":  # as a policy that rewrites k left it, and we marked it
                admitted(replica, "data")["metadata"]["annotations"][ADMITTED] = "data/k"
            objects[key] = replica
    admission = {n: a for n in namespaces
                 if (a := draw(st.sampled_from(["", "", "label", "data"])))}
    return World(namespaces, objects, draw(st.sampled_from([0.0, 30.0])), admission)


# -- the run's side: a recording server and the workers -------------------------------------


def server_of(world: World, clock: FakeClock) -> FakeKube:
    """The server the run writes to: the world's objects, its admission per namespace."""
    return FakeKube(copy.deepcopy(world.objects), clock,
                    admission={n: ADMISSIONS[a] for n, a in world.admission.items()})


def writes(server: FakeKube) -> list[tuple[str, str, str, float]]:
    """Every write the server stored: (verb, object, the source it is for, seconds into the
    run). A patch that makes an object ours is an adoption ("adopt"), one that leaves the
    replica ours marks what admission changed ("admitted"), one that takes our marks off is
    a release."""
    done = []
    for w in server.writes:
        before = (w.before or {}).get("metadata", {}).get("annotations") or {}
        after = (w.after or {}).get("metadata", {}).get("annotations") or {}
        verb = w.verb
        if verb == "patch":
            verb = ("release" if REPLICA_OF not in after else
                    "admitted" if REPLICA_OF in before else "adopt")
        owner = after.get(REPLICA_OF, "") if verb in ("create", "update", "admitted", "adopt") \
            else before[REPLICA_OF]
        done.append((verb, w.key, owner, w.at - START))
    return done


class RecordingRecorder:
    """The Events the replicator would write: (reason, the object they are on, message)."""

    def __init__(self) -> None:
        self.warnings: list[tuple[str, str, str]] = []

    def warning(self, ref: Any, reason: str, message: str) -> None:
        self.warnings.append((reason, f"{ref.namespace}/{ref.name}", message))

    def tally(self, *_args: Any) -> None:
        pass


def caches_of(world: World) -> tuple[Caches, Store[CachedObject], Store[Namespace]]:
    objects: Store[CachedObject] = Store(object_indexers())
    objects.replace({k: cached(v) for k, v in world.objects.items()})
    spaces: Store[Namespace] = Store()
    spaces.replace({k: namespace_from_json(v) for k, v in world.namespaces.items()})
    return Caches(objects, spaces, CONFIGMAP), objects, spaces


def plan_all(world: World) -> list[Any]:
    caches, _, _ = caches_of(world)
    keys = {s.key for s in caches.sources()} | set(caches.replicated_sources())
    grace = Grace.from_now(world.grace)
    return [plan_source(k, caches, caches.get, SCOPE, grace)
            for k in sorted(keys)]


def run(world: World) -> tuple[FakeKube, RecordingRecorder]:
    """The workers, round after round (each round ends with a relist), until quiet."""
    clock = FakeClock(START)
    server = server_of(world, clock)
    recorder = RecordingRecorder()
    caches, objects, spaces = caches_of(world)
    listed = [server.revision]  # the revision the caches were last listed at (the watermark)
    replicator = Replicator(server, caches, SCOPE, recorder,  # type: ignore[arg-type]
                            Memory(lambda key: listed[0], world.grace, clock),
                            unserved=frozenset({"ConfigMap"}))
    queue: WorkQueue[Key] = WorkQueue(clock=clock)
    # Start-up: the informers' first lists arrive as "added" events, before any worker runs,
    # so a replica of a cached source is left to that source's plan (as manager does).
    for namespace in spaces.values():
        for key in namespace_keys(CONFIGMAP, None, namespace, caches.sources(),
                                  caches.namespace, SCOPE):
            queue.add(key)
    for obj in objects.values():
        for key in resync_keys(CONFIGMAP, obj, caches.get, caches.sources_named):
            queue.add(key)
    for _ in range(10):
        written = len(server.writes)
        while True:
            if (key := queue.get()) is None:
                if not queue.counts()[2]:
                    break
                clock.step(world.grace)  # only delayed keys left: on to when they are due
                continue
            try:
                result = replicator.reconcile(key)
            except ReconcileError as err:
                raise AssertionError(f"{key}: {err}") from None
            for follow_up in result.follow_up:
                queue.add(follow_up)  # type: ignore[arg-type]
            if result.requeue_after:
                queue.add_after(key, result.requeue_after)
            queue.done(key)
        assert replicator.pending_removals() == 0, "every removal waited out is done"
        if len(server.writes) == written:
            return server, recorder
        # The watch brings the writes back: a relist, and an event for each change.
        deleted, changed = objects.replace({k: cached(v) for k, v in server.objects.items()})
        listed[0] = server.revision
        events = [*((old, None) for old in deleted.values()), *changed.values()]
        for old, new in events:
            for key in object_keys(CONFIGMAP, old, new, caches.sources_named):
                queue.add(key)
    raise AssertionError(f"still writing after 10 rounds: {writes(server)}")


def expected_writes(plans: list[Any], world: World) -> Counter[tuple[str, str, str, float]]:
    """The writes a plan's actions mean, and when (seconds into the run): a recreate is a
    delete and a create; and where admission rewrites k, the patch that marks it on a
    replica written without the mark (a rewrite carries the mark the replica had)."""
    writes: Counter[tuple[str, str, str, float]] = Counter()
    for p in plans:
        for a in p.actions:
            where = f"{a.namespace}/{a.name}"
            for verb in (("delete", "create") if a.kind == "recreate" else (a.kind,)):
                writes[(verb, where, a.source, a.due_in)] += 1
            if a.kind in ("create", "update", "recreate", "adopt") and \
                    world.admission.get(a.namespace) == "data":
                current = world.objects.get(where) if a.kind != "create" else None
                if current is None or ADMITTED not in current["metadata"]["annotations"]:
                    writes[("admitted", where, a.source, a.due_in)] += 1
    return writes


@settings(max_examples=300)
@given(worlds())
def test_what_plan_lists_is_what_the_workers_write_and_report(world: World) -> None:
    plans = plan_all(world)
    server, recorder = run(world)

    # Every write plan listed, and when: a removal (and the create that follows one) after
    # the grace, anything else at once.
    done = Counter(writes(server))
    assert done == expected_writes(plans, world)
    waited = [a for p in plans for a in p.actions if a.kind in REMOVALS]
    assert all(a.due_in == world.grace for a in waited), "plan says how long each waits"
    conflicts = {(r, obj, m.split(" ", 1)[0]) for r, obj, m in recorder.warnings
                 if r == "TargetConflict"}
    assert conflicts == {("TargetConflict", c.source, f"{c.namespace}/{c.name}")
                         for p in plans for c in p.conflicts}
    problems = {(r, obj) for r, obj, _ in recorder.warnings
                if r not in ("TargetConflict", "PullNotAllowed", MUTATED)}
    assert problems == {("InvalidSpec", p.source) for p in plans if p.invalid} | {
        ("SourceNotAllowed", p.source) for p in plans if p.not_allowed}

    # What admission changed is said once per source that wrote where admission acts.
    mutated = [obj for r, obj, _ in recorder.warnings if r == MUTATED]
    assert sorted(mutated) == sorted({source for verb, where, source, _ in writes(server)
                                      if verb in ("create", "update", "adopt")
                                      and world.admission.get(where.split("/", 1)[0])})

    # Every pull that gets nothing is said once, on its Namespace, with why.
    caches, _, spaces = caches_of(world)
    refused = [r for ns in spaces.values()
               for r in [*pull_refusals(ns, caches, SCOPE, ()),
                         *unserved_pulls(ns, frozenset({"ConfigMap"}))]]
    said = [(obj, m) for r, obj, m in recorder.warnings if r == "PullNotAllowed"]
    assert sorted(said) == sorted((f"/{r.namespace}", r.message) for r in refused)

    converged = World(world.namespaces, server.objects, world.grace, world.admission)
    after = plan_all(converged)
    assert [(p.source, p.actions) for p in after if p.actions] == []
    restarted, _ = run(converged)  # a new process: no memory, the caches listed afresh
    assert restarted.writes == [], "a restart writes nothing, admitted replicas included"


@settings(max_examples=300)
@given(worlds())
def test_a_resync_that_leaves_replicas_to_their_sources_misses_no_work(world: World) -> None:
    """The periodic resync does not wake the target key of a replica whose source is cached
    and valid (routing.resync_keys): that source's own resync plans it. So whatever the
    target's reconcile would do there now (an action, or a conflict to report), some source's
    plan lists it, and its follow-up wakes the target."""
    caches, objects, _ = caches_of(world)
    grace = Grace.from_now(world.grace)
    woken = {key for obj in objects.values()
             for key in resync_keys(CONFIGMAP, obj, caches.get, caches.sources_named)}
    planned = {(x.namespace, x.name) for key in woken if key.role == SOURCE
               for p in [plan_source(key.object_key, caches, caches.get, SCOPE, grace)]
               for x in (*p.actions, *p.conflicts)}
    left = [obj for obj in objects.values()
            if target_key(CONFIGMAP, obj.namespace, obj.name) not in woken
            and target_key(CONFIGMAP, obj.namespace, obj.name)
            in object_keys(CONFIGMAP, obj, obj, caches.sources_named)]
    assert all(obj.replica_of is not None for obj in left)
    for obj in left:
        decision = decide(obj.namespace, obj.name, obj, caches, SCOPE, grace)
        if decision.action is not None or decision.conflicts:
            assert (obj.namespace, obj.name) in planned, (obj.key, decision)


# -- a fleet: the home cluster and up to two members ------------------------------------------
#
# The same rule across clusters: sources in the home cluster pick clusters (replicate-to-
# clusters and -matching; neither: home only); a member's objects are its own (replicas of
# this home, marked with its name; another home's; someone's own). Each cluster is planned
# with its own view (clusters.MemberCaches over the home's sources) and run by its own
# replicator against its own server, as operator/fleet runs it.

HOME = "local"
MEMBER_NAMES = ("b", "c")
CLUSTERS = ({}, {}, {REPLICATE_TO_CLUSTERS: "*"}, {REPLICATE_TO_CLUSTERS: "b"},
            {REPLICATE_TO_CLUSTERS: "local,c"}, {REPLICATE_TO_CLUSTERS: "*,!b"},
            {REPLICATE_TO_CLUSTERS_MATCHING: "region=eu"},
            {REPLICATE_TO_CLUSTERS: "b", REPLICATE_TO_CLUSTERS_MATCHING: "region in (us)"},
            {REPLICATE_TO_CLUSTERS: "b,["})  # invalid
FLEET_SCOPE = Scope.from_flags("*", "kube-*", "push!=no", cluster=HOME)


@dataclass
class MemberWorld:
    labels: dict[str, str]
    namespaces: dict[str, dict[str, Any]]
    objects: dict[str, dict[str, Any]]
    admission: dict[str, str] = field(default_factory=dict)


@dataclass
class Fleet:
    home: World
    members: dict[str, MemberWorld]


def member_cached(raw: dict[str, Any]) -> CachedObject:
    """A member's object as its informer keeps it: never a source; ours when marked HOME."""
    return object_from_json(copy.deepcopy(raw), DEFAULT_RULES, CONFIGMAP, HOME, False)


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    home = draw(worlds())
    # Sources pick clusters too (a source's annotations, added to what worlds() drew).
    for obj in home.objects.values():
        annotations = obj["metadata"].get("annotations")
        if annotations is not None and set(SOURCE_ANNOTATIONS) & set(annotations):
            annotations.update(draw(st.sampled_from(CLUSTERS)))
    sources = [o for o in home.objects.values()
               if set(SOURCE_ANNOTATIONS) & set(o["metadata"].get("annotations") or {})]
    members = {}
    for name in MEMBER_NAMES[:draw(st.integers(0, 2))]:
        labels = {"region": draw(st.sampled_from(["eu", "us"]))} if draw(st.booleans()) else {}
        namespaces: dict[str, dict[str, Any]] = {}
        for space in NAMESPACES:
            if not draw(st.booleans()):
                continue
            meta: dict[str, Any] = {"name": space, "resourceVersion": "1",
                                    "uid": f"{name}-n-{space}", "labels": {}}
            if draw(st.booleans()):
                meta["labels"]["env"] = draw(st.sampled_from(["prod", "dev"]))
            if draw(st.integers(0, 5)) == 0:
                meta["labels"]["configmirror.io/ignore"] = "true"
            if pull := draw(st.sampled_from(PULLS)):
                meta["annotations"] = {PULL: pull}
            namespaces[space] = {"metadata": meta}
        if draw(st.integers(0, 3)) == 0:  # the member side's own namespace
            namespaces[MEMBER_NAMESPACE] = {"metadata": {
                "name": MEMBER_NAMESPACE, "resourceVersion": "1", "uid": f"{name}-n-member"}}
        objects: dict[str, dict[str, Any]] = {}
        for space in namespaces:
            for cm in NAMES:
                key = f"{space}/{cm}"
                occupant = draw(st.sampled_from(["none", "none", "replica", "replica",
                                                 "foreign", "other home", "unmarked"]))
                owners = [s for s in sources if s["metadata"]["name"] == cm]
                if occupant == "foreign":
                    objects[key] = {"metadata": {"namespace": space, "name": cm,
                                                 "uid": f"{name}-f-{key}",
                                                 "resourceVersion": "1"},
                                    "data": {"mine": "1"}}
                    continue
                if occupant == "none" or not owners:
                    continue
                origin = copy.deepcopy(draw(st.sampled_from(owners)))
                if draw(st.booleans()):
                    origin["data"] = {"k": "old"}
                written = cached(origin)
                assert written.compiled is not None
                if occupant == "replica":
                    written = replace(written, compiled=for_cluster(written.compiled, HOME))
                elif occupant == "other home":
                    written = replace(written, compiled=for_cluster(written.compiled, "other"))
                replica = copy.deepcopy(desired_body(written, space))
                replica["metadata"].update(uid=f"{name}-r-{key}", resourceVersion="1")
                if draw(st.integers(0, 4)) == 0:
                    replica["data"] = {"k": "by hand"}
                objects[key] = replica
        admission = {n: a for n in namespaces
                     if (a := draw(st.sampled_from(["", "", "label", "data"])))}
        members[name] = MemberWorld(labels, namespaces, objects, admission)
    return Fleet(home, members)


def home_caches(fleet: Fleet) -> Caches:
    caches, _, _ = caches_of(fleet.home)
    return caches


def member_caches(fleet: Fleet, name: str, home: Caches
                  ) -> tuple[MemberCaches, Store[CachedObject], Store[Namespace]]:
    world = fleet.members[name]
    objects: Store[CachedObject] = Store(object_indexers())
    objects.replace({k: member_cached(v) for k, v in world.objects.items()})
    spaces: Store[Namespace] = Store()
    spaces.replace({k: namespace_from_json(v) for k, v in world.namespaces.items()})
    return MemberCaches(home, objects, spaces, HOME), objects, spaces


def member_scope(fleet: Fleet, name: str) -> Scope:
    return FLEET_SCOPE.for_cluster(name, fleet.members[name].labels, MEMBER_NAMESPACE)


def plan_member(fleet: Fleet, name: str) -> list[Any]:
    caches, _, _ = member_caches(fleet, name, home_caches(fleet))
    keys = {s.key for s in caches.sources()} | set(caches.replicated_sources())
    grace = Grace.from_now(fleet.home.grace)
    return [plan_source(k, caches, caches.get, member_scope(fleet, name), grace)
            for k in sorted(keys)]


def run_member(fleet: Fleet, name: str) -> tuple[FakeKube, RecordingRecorder]:
    """A member's workers, as operator/fleet runs them: its own server, caches and queue;
    the home's sources; every home source's key queued once its caches have synced."""
    world = fleet.members[name]
    clock = FakeClock(START)
    server = FakeKube(copy.deepcopy(world.objects), clock,
                      admission={n: ADMISSIONS[a] for n, a in world.admission.items()})
    recorder = RecordingRecorder()
    home = home_caches(fleet)
    caches, objects, spaces = member_caches(fleet, name, home)
    scope = member_scope(fleet, name)
    listed = [server.revision]
    replicator = Replicator(server, caches, scope,  # type: ignore[arg-type]
                            ClusterRecorder(recorder, name),  # type: ignore[arg-type]
                            Memory(lambda key: listed[0], fleet.home.grace, clock),
                            reports_sources=False)
    queue: WorkQueue[Key] = WorkQueue(clock=clock)
    for namespace in spaces.values():
        for key in namespace_keys(CONFIGMAP, None, namespace, caches.sources(),
                                  caches.source_namespace, scope):
            queue.add(key)
    for obj in objects.values():
        for key in resync_keys(CONFIGMAP, obj, caches.source, caches.sources_named, home=False):
            queue.add(key)
    for source in caches.sources():
        queue.add(source_key(CONFIGMAP, source.namespace, source.name))
    for _ in range(10):
        written = len(server.writes)
        while True:
            if (key := queue.get()) is None:
                if not queue.counts()[2]:
                    break
                clock.step(fleet.home.grace)
                continue
            try:
                result = replicator.reconcile(key)
            except ReconcileError as err:
                raise AssertionError(f"{name}: {key}: {err}") from None
            for follow_up in result.follow_up:
                queue.add(follow_up)  # type: ignore[arg-type]
            if result.requeue_after:
                queue.add_after(key, result.requeue_after)
            queue.done(key)
        assert replicator.pending_removals() == 0
        if len(server.writes) == written:
            return server, recorder
        deleted, changed = objects.replace({k: member_cached(v)
                                            for k, v in server.objects.items()})
        listed[0] = server.revision
        for old, new in [*((old, None) for old in deleted.values()), *changed.values()]:
            for key in object_keys(CONFIGMAP, old, new, caches.sources_named, home=False):
                queue.add(key)
    raise AssertionError(f"{name}: still writing after 10 rounds: {writes(server)}")


@settings(max_examples=200)
@given(fleets())
def test_in_every_cluster_of_a_fleet_what_plan_lists_is_what_the_workers_write(
        fleet: Fleet) -> None:
    # The home cluster as before, under the home's name (a source that picks only members
    # leaves it alone).
    home = World(fleet.home.namespaces, fleet.home.objects, fleet.home.grace,
                 fleet.home.admission)
    for name, world in fleet.members.items():
        plans = plan_member(fleet, name)
        server, recorder = run_member(fleet, name)
        done = Counter(writes(server))
        member_as_world = World(world.namespaces, world.objects, fleet.home.grace,
                                world.admission)
        assert done == expected_writes(plans, member_as_world), name
        for verb, where, _, _ in done:
            assert verb not in ("create", "update") or not where.startswith(
                f"{MEMBER_NAMESPACE}/"), "the member side's namespace gets no replica"
            stored = server.objects.get(where)
            if verb in ("create", "update") and stored is not None:
                assert stored["metadata"]["annotations"][SOURCE_CLUSTER] == HOME
        conflicts = {(r, obj, m.split(" ", 2)[2].split(" ", 1)[0]) for r, obj, m
                     in recorder.warnings if r == "TargetConflict"}
        assert conflicts == {("TargetConflict", c.source, f"{c.namespace}/{c.name}")
                             for p in plans for c in p.conflicts}, name
        assert all(m.startswith(f"cluster {name}: ") for _, _, m in recorder.warnings)
        assert not [r for r, _, _ in recorder.warnings if r in ("InvalidSpec",
                                                                "SourceNotAllowed")]
        # What the workers did is all there is to do, and a restart writes nothing.
        converged = Fleet(home, {**fleet.members, name: MemberWorld(
            world.labels, world.namespaces, server.objects, world.admission)})
        assert [(p.source, p.actions) for p in plan_member(converged, name) if p.actions] == []
        restarted, _ = run_member(converged, name)
        assert restarted.writes == [], f"{name}: a restart writes nothing"


@settings(max_examples=100)
@given(fleets())
def test_a_source_reaches_a_member_exactly_when_its_cluster_annotations_pick_it(
        fleet: Fleet) -> None:
    home = home_caches(fleet)
    for name, world in fleet.members.items():
        scope = member_scope(fleet, name)
        caches, _, spaces = member_caches(fleet, name, home)
        for source in caches.sources():
            spec = source.compiled.spec if source.compiled is not None else None
            annotations = (fleet.home.objects[source.key]["metadata"].get("annotations")
                           or {})
            picked = spec is not None and (
                (REPLICATE_TO_CLUSTERS in annotations
                 and spec.cluster_patterns is not None
                 and spec.cluster_patterns.matches(name))
                or (REPLICATE_TO_CLUSTERS_MATCHING in annotations
                    and spec.cluster_selector is not None
                    and spec.cluster_selector.matches(world.labels)))
            for namespace in spaces.values():
                if wants(source, namespace, scope):
                    assert picked, (name, source.key, namespace.name)

"""Our own writes, remembered by the reconciler until the watch delivers them."""

from __future__ import annotations

import base64
import sys
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from configmirror.client.events import EventRecorder
from configmirror.client.store import Store
from configmirror.clock import FakeClock
from configmirror.operator.memory import Expectations, Memory
from configmirror.operator.replicator import Replicator
from configmirror.replication.model import (
    CachedObject,
    Caches,
    Namespace,
    namespace_from_json,
    object_indexers,
    target_key,
)
from configmirror.replication.spec import ON_DELETE, REPLICATE_TO
from configmirror.vocabulary import CONFIGMAP, ROLE, SECRET, Kind
from configmirror_testing import objects
from configmirror_testing.builders import SCOPE, cached, source
from configmirror_testing.fakekube import FakeKube, adds_labels


def obj(rv: str, content_hash: str = "h") -> CachedObject:
    return CachedObject("a", "cfg", "u", rv, "src/cfg", False, content_hash, compiled=None)


class Cache:
    """The informer's side: a store and its watermark, moved by the test."""

    def __init__(self) -> None:
        self.items: dict[str, CachedObject] = {}
        self.watermark = 0

    def get(self, key: str) -> CachedObject | None:
        return self.items.get(key)


def test_a_create_is_seen_until_the_watch_delivers_it() -> None:
    cache = Cache()
    expectations = Expectations(lambda key: cache.watermark)
    cache.watermark = 10
    expectations.wrote(obj("11"))
    assert expectations.view("a/cfg", cache.get) == obj("11"), "the gap: our write counts"
    cache.items["a/cfg"], cache.watermark = obj("11"), 11
    assert expectations.view("a/cfg", cache.get) == obj("11")
    assert len(expectations) == 0, "once delivered, the cache is the truth"


def test_a_create_deleted_by_someone_before_we_looked_is_not_resurrected() -> None:
    cache = Cache()
    expectations = Expectations(lambda key: cache.watermark)
    expectations.wrote(obj("11"))
    cache.watermark = 12  # ADDED at 11, DELETED at 12 both applied
    assert expectations.view("a/cfg", cache.get) is None


def test_an_update_hides_the_stale_cached_version_until_the_watch_catches_up() -> None:
    cache = Cache()
    cache.items["a/cfg"], cache.watermark = obj("5", "old"), 5
    expectations = Expectations(lambda key: cache.watermark)
    expectations.wrote(obj("9", "new"))
    assert expectations.view("a/cfg", cache.get) == obj("9", "new")
    newer = replace(obj("12", "edited by hand"))
    cache.items["a/cfg"], cache.watermark = newer, 12
    assert expectations.view("a/cfg", cache.get) == newer, "a later edit is not hidden"


def test_a_delete_hides_the_deleted_version_only() -> None:
    cache = Cache()
    cache.items["a/cfg"], cache.watermark = obj("5"), 5
    expectations = Expectations(lambda key: cache.watermark)
    expectations.deleted("a/cfg", "5")
    assert expectations.view("a/cfg", cache.get) is None
    cache.items["a/cfg"], cache.watermark = obj("8"), 8  # created again by someone
    assert expectations.view("a/cfg", cache.get) == obj("8")


def test_non_integer_resource_versions_make_expectations_step_aside() -> None:
    cache = Cache()
    expectations = Expectations(lambda key: cache.watermark)
    expectations.wrote(obj("abc"))
    assert expectations.view("a/cfg", cache.get) is None and len(expectations) == 0


def test_the_watermark_is_read_before_the_cache() -> None:
    """Were the cache read first, a write applied between the two reads would be missed."""
    order: list[str] = []
    cache = Cache()

    def watermark(key: str) -> int:
        order.append("watermark")
        return cache.watermark

    def get(key: str) -> CachedObject | None:
        order.append("cache")
        return cache.get(key)

    expectations = Expectations(watermark)
    expectations.wrote(obj("3"))
    expectations.view("a/cfg", get)
    assert order == ["watermark", "cache"]


def test_the_echo_of_our_write_is_recognised_once_and_ends_the_expectation() -> None:
    cache = Cache()
    expectations = Expectations(lambda key: cache.watermark)
    expectations.wrote(obj("11"))
    assert expectations.echo(obj("11")), "the watch delivering exactly what we wrote"
    assert len(expectations) == 0, "nothing left to hide once it is delivered"
    assert not expectations.echo(obj("11")), "a second delivery (a resync) is not an echo"


def test_another_version_other_content_or_a_delete_is_not_an_echo() -> None:
    cache = Cache()
    expectations = Expectations(lambda key: cache.watermark)
    expectations.wrote(obj("11"))
    assert not expectations.echo(obj("12")), "someone's later edit"
    assert not expectations.echo(obj("10")), "an older version"
    assert not expectations.echo(obj("11", "changed by a webhook")), "stored other than written"
    assert not expectations.echo(obj("not-a-number"))
    assert len(expectations) == 1, "still expected: only the echo ends it"
    expectations.deleted("a/cfg", "11")
    assert not expectations.echo(obj("11")), "a delete of ours has no echo to skip"


def test_the_replicator_takes_only_a_replica_for_an_echo_never_a_source_or_a_foreign_object(
        ) -> None:
    memory = Memory(lambda key: 0, 0.0, FakeClock())
    expectations = memory.expectations
    kube = FakeKube()
    recorder = EventRecorder(kube, clock=FakeClock())  # never started: it writes nothing
    replicator = Replicator(kube, Caches(Store(), Store(), CONFIGMAP), SCOPE, recorder, memory)
    written = obj("11")
    source = replace(written, compiled=cached({"metadata": {
        "namespace": "a", "name": "cfg", "annotations": {REPLICATE_TO: "b"}}}).compiled)
    foreign = replace(written, replica_of=None)
    for other in (source, foreign):
        expectations.wrote(written)
        assert replicator.echo(other) is False, other
    assert replicator.echo(written) is True
    assert replicator.echo(written) is False, "an echo ends the expectation"
    assert not kube.written() and recorder.pending() == 0, "telling an echo asks nothing"


# -- the watch event of our own write, stored without a transform ------------------------------

_text = st.text("abcxyz-", max_size=6)
_keys = st.text("abcdef", min_size=1, max_size=4)


@st.composite
def _source_body(draw: st.DrawFn, kind: Kind) -> dict[str, Any]:
    """A source of `kind` as the API server holds it: data, labels and annotations that
    are copied or not, on-delete retain, immutable, a Secret's type, a Role's rules."""
    annotations = {REPLICATE_TO: "a", **draw(st.dictionaries(
        st.sampled_from(["note", "example.com/owner", "kubectl.kubernetes.io/last-applied"
                         "-configuration"]), _text, max_size=2))}
    if draw(st.booleans()):
        annotations[ON_DELETE] = "retain"
    body: dict[str, Any] = {"metadata": {
        "namespace": "src", "name": "cfg", "uid": "u-src", "resourceVersion": "10",
        "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations,
        "labels": draw(st.dictionaries(st.sampled_from(["team", "app.kubernetes.io/name"]),
                                       _text, max_size=2))}}
    if kind is ROLE:
        body["rules"] = draw(st.lists(st.fixed_dictionaries({
            "apiGroups": st.just([""]), "resources": st.lists(_keys, max_size=2),
            "verbs": st.lists(st.sampled_from(["get", "list"]), min_size=1)}), max_size=2))
        return body
    data = draw(st.dictionaries(_keys, _text, max_size=3))
    if kind is SECRET:
        body["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body["type"] = draw(st.sampled_from(["Opaque", "example.com/config"]))
    else:
        body["data"] = data
        if draw(st.booleans()):
            body["binaryData"] = {"bin": base64.b64encode(b"\x00\x01").decode()}
    if draw(st.booleans()):
        body["immutable"] = True
    return body


@pytest.mark.parametrize("kind", [CONFIGMAP, SECRET, ROLE], ids=lambda k: k.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_write_stored_as_written_is_held_as_the_informer_makes_it_of_its_watch_event(
        kind: Kind, data: st.DataObject) -> None:
    """The informer stores what `delivered` gives in place of transforming the event: it
    must be equal to that transform, field for field (the digest, the names, retain)."""
    src = objects.cached(data.draw(_source_body(kind)), kind)
    memory = Memory(lambda key: 0, 0.0, FakeClock())
    kube = FakeKube(resource=kind.plural, revision=29)
    namespaces: Store[Namespace] = Store()
    for name in ("src", "a"):
        namespaces.upsert(name, namespace_from_json({"metadata": {"name": name}}))
    caches = Caches(Store(object_indexers()), namespaces, kind)
    caches.objects.upsert(src.key, src)  # type: ignore[attr-defined]
    replicator = Replicator(kube, caches, SCOPE, EventRecorder(kube, clock=FakeClock()), memory)
    replicator.reconcile(target_key(kind, "a", "cfg"))
    stored = kube.objects["a/cfg"]
    version = stored["metadata"]["resourceVersion"]
    held = memory.expectations.delivered("a/cfg", version)
    assert held is not None, "a write stored as written is exact"
    assert held == objects.cached(stored, kind)
    assert held.namespace is sys.intern("a") and held.name is sys.intern("cfg"), \
        "interned as the informer interns them: 100,000 replicas share their names"
    assert memory.expectations.delivered("a/cfg", str(int(version) + 1)) is None, \
        "another version of it is not our write"


def test_a_write_admission_changed_is_not_exact_so_the_informer_transforms_its_event(
        ) -> None:
    memory = Memory(lambda key: 0, 0.0, FakeClock())
    kube = FakeKube(revision=29, admission={"a": adds_labels({"injected": "yes"})})
    namespaces: Store[Namespace] = Store()
    for name in ("src", "a"):
        namespaces.upsert(name, namespace_from_json({"metadata": {"name": name}}))
    caches = Caches(Store(object_indexers()), namespaces, CONFIGMAP)
    src = source({REPLICATE_TO: "a"})
    caches.objects.upsert(src.key, src)  # type: ignore[attr-defined]
    replicator = Replicator(kube, caches, SCOPE, EventRecorder(kube, clock=FakeClock()), memory)
    replicator.reconcile(target_key(CONFIGMAP, "a", "cfg"))
    version = kube.objects["a/cfg"]["metadata"]["resourceVersion"]
    assert len(memory.expectations) == 1, "the write is expected"
    assert memory.expectations.delivered("a/cfg", version) is None


def test_an_exact_write_is_delivered_until_settled_and_a_newer_write_is_not_settled_by_it(
        ) -> None:
    cache = Cache()
    expectations = Expectations(lambda key: cache.watermark)
    expectations.wrote(obj("11"), exact=True)
    held = expectations.delivered("a/cfg", "11")
    assert held == obj("11")
    assert expectations.view("a/cfg", cache.get) == obj("11"), \
        "until the cache holds it, our write is what the worker sees"
    expectations.settled("a/cfg", held)
    assert len(expectations) == 0
    expectations.wrote(obj("11"), exact=True)
    first = expectations.delivered("a/cfg", "11")
    assert first is not None
    expectations.wrote(obj("14", "newer"), exact=True)  # written again meanwhile
    expectations.settled("a/cfg", first)
    assert expectations.view("a/cfg", cache.get) == obj("14", "newer"), "not the newer one"
    expectations.wrote(obj("15"))  # not exact: the informer transforms the event
    assert expectations.delivered("a/cfg", "15") is None
    expectations.deleted("a/cfg", "15")
    assert expectations.delivered("a/cfg", "15") is None, "a delete of ours has no object"


def test_nothing_is_delivered_for_a_key_we_never_wrote_or_at_another_version() -> None:
    """Most watch events are someone else's: delivered() answers None for them (the informer
    transforms and tells them as before), and for our exact write at any other version."""
    expectations = Expectations(lambda key: 0)
    assert expectations.delivered("a/cfg", "11") is None, "nothing of ours pending"
    expectations.wrote(obj("11"), exact=True)
    assert expectations.delivered("a/other", "11") is None, "another object"
    assert expectations.delivered("a/cfg", "12") is None, "a later version, someone else's"
    assert expectations.delivered("a/cfg", "10") is None, "an earlier version"
    assert expectations.delivered("a/cfg", "11") == obj("11")

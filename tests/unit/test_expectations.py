"""Our own writes, remembered by the reconciler until the watch delivers them."""

from __future__ import annotations

from dataclasses import replace

from configmirror.clock import FakeClock
from configmirror.events import EventRecorder
from configmirror.memory import Expectations, Memory
from configmirror.model import CachedObject, Caches
from configmirror.replicator import Replicator
from configmirror.spec import REPLICATE_TO
from configmirror.store import Store
from configmirror.vocabulary import CONFIGMAP
from configmirror_testing.builders import SCOPE, cached
from configmirror_testing.fakekube import FakeKube


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

"""Tallies: many reconciles' counts become one Event per object once it is quiet."""

from __future__ import annotations

import pytest

from configmirror.clock import FakeClock
from configmirror.events import ObjectRef, Tallies
from configmirror.replicator import replicated_message

A = ObjectRef("ConfigMap", "src", "a", "uid-a", "1")
B = ObjectRef("ConfigMap", "src", "b", "uid-b", "1")


def test_counts_of_one_object_become_one_event_after_it_is_quiet() -> None:
    clock = FakeClock()
    tallies = Tallies(clock, quiet=2.0, max_age=60.0)
    for i in range(3000):
        tallies.add(A, "Replicated", "created", f"ns-{i}", replicated_message)
        clock.step(0.001)
    assert tallies.due() == []
    assert tallies.next_due_in() == pytest.approx(1.999)
    clock.step(2.0)
    (event,) = tallies.due()
    assert (event.ref, event.type, event.reason) == (A, "Normal", "Replicated")
    assert event.message == "created 3000, updated 0, deleted 0 replicas"
    assert len(tallies) == 0 and tallies.next_due_in() is None


def test_one_replica_written_twice_counts_once() -> None:
    clock = FakeClock()
    tallies = Tallies(clock, quiet=1.0)
    tallies.add(A, "Replicated", "updated", "ns-1", replicated_message)
    tallies.add(A, "Replicated", "updated", "ns-1", replicated_message)
    tallies.add(A, "Replicated", "deleted", "ns-2", replicated_message)
    clock.step(1.0)
    assert [e.message for e in tallies.due()] == ["created 0, updated 1, deleted 1 replicas"]


def test_objects_are_tallied_apart_and_a_long_stream_is_written_at_max_age() -> None:
    clock = FakeClock()
    tallies = Tallies(clock, quiet=2.0, max_age=10.0)
    for i in range(20):  # B keeps changing every second: never quiet
        tallies.add(B, "Replicated", "created", f"ns-{i}", replicated_message)
        if i == 0:
            tallies.add(A, "Replicated", "created", "ns-x", replicated_message)
        clock.step(1.0)
        due = tallies.due()
        if i == 1:
            assert [e.ref for e in due] == [A]
        elif i in (9, 19):  # every 10 s, with that stretch's 10 namespaces
            assert [(e.ref, e.message) for e in due] == [
                (B, "created 10, updated 0, deleted 0 replicas")]
        else:
            assert due == [], i


def test_flush_all_takes_every_tally_now() -> None:
    clock = FakeClock()
    tallies = Tallies(clock)
    tallies.add(A, "Replicated", "created", "x", replicated_message)
    assert len(tallies.due(flush_all=True)) == 1 and len(tallies) == 0


def test_only_a_new_tally_can_be_due_sooner() -> None:
    # The recorder is woken only when add() opens a tally: any other count must leave every
    # tally due no sooner than before, or the recorder's wait would end too late.
    clock = FakeClock()
    tallies = Tallies(clock, quiet=2.0, max_age=10.0)
    assert tallies.add(A, "Replicated", "created", "ns-0", replicated_message) is True
    for i in range(1, 200):
        due_at = clock.now() + (tallies.next_due_in() or 0.0)
        clock.step(0.1)
        assert tallies.add(A, "Replicated", "updated", f"ns-{i}", replicated_message) is False
        assert clock.now() + (tallies.next_due_in() or 0.0) >= due_at
        tallies.due()  # the max-age flush reopens the tally on the next count
        if not len(tallies):
            assert tallies.add(A, "Replicated", "updated", "again", replicated_message) is True
    assert tallies.add(B, "Replicated", "created", "ns-0", replicated_message) is True

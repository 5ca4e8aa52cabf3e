"""What the operator remembers between reconciles: removals in their grace, and what was
reported (the expectations of our writes have tests of their own, test_expectations.py)."""

from __future__ import annotations

from configmirror.clock import FakeClock
from configmirror.operator.memory import Memory, Removals, Reported


def test_a_removal_waits_the_grace_from_when_it_was_first_seen_on_the_clock() -> None:
    clock = FakeClock(100.0)
    removals = Removals(30.0, clock)
    assert removals.grace().due_in("a/cfg") == 30.0, "never seen: the whole grace from now"
    removals.waiting("a/cfg", clock.now())
    clock.step(10.0)
    removals.waiting("a/cfg", clock.now())  # seen again: it still waits from the first time
    assert removals.grace().due_in("a/cfg") == 20.0
    clock.step(25.0)
    assert removals.grace().due_in("a/cfg") == 0.0, "due, never overdue"
    assert len(removals) == 1 and removals.keys() == ["a/cfg"]


def test_a_removal_whose_cause_went_waits_the_whole_grace_again() -> None:
    clock = FakeClock(100.0)
    removals = Removals(30.0, clock)
    removals.waiting("a/cfg", clock.now())
    clock.step(20.0)
    removals.forget("a/cfg")
    removals.forget("b/cfg")  # never waited: nothing to forget
    assert len(removals) == 0
    assert removals.grace().due_in("a/cfg") == 30.0
    assert removals.grace().seconds == 30.0 and removals.grace().now == 120.0


def test_a_report_is_news_once_per_value_and_again_once_forgotten() -> None:
    reported: Reported[str, str] = Reported()
    assert reported.first("src/cfg", "v1")
    assert not reported.first("src/cfg", "v1"), "said already: a resync says nothing"
    assert "src/cfg" in reported and len(reported) == 1
    assert reported.first("src/cfg", "v2"), "something new to say"
    assert not reported.first("src/cfg", "v2")
    reported.forget("src/cfg")
    reported.forget("other")  # nothing said there: nothing to forget
    assert "src/cfg" not in reported and len(reported) == 0
    assert reported.first("src/cfg", "v2"), "forgotten: the same is news again"


def test_a_report_replaced_gives_what_was_said_before_and_none_forgets_it() -> None:
    reported: Reported[str, frozenset[str]] = Reported()
    assert reported.replace("team-a", frozenset({"x"})) is None
    assert reported.replace("team-a", frozenset({"y"})) == frozenset({"x"})
    assert reported.replace("team-a", None) == frozenset({"y"})
    assert "team-a" not in reported
    assert reported.replace("team-a", None) is None


def test_a_value_equal_to_none_like_values_is_still_news_the_first_time() -> None:
    reported: Reported[str, frozenset[str]] = Reported()
    assert reported.first("k", frozenset()), "an empty value said is still said"
    assert not reported.first("k", frozenset())


def test_one_kinds_memory_holds_each_part_apart() -> None:
    clock = FakeClock(5.0)
    memory = Memory(lambda key: 7, 60.0, clock)
    memory.problems.first("src/cfg", ("1", "2", "InvalidSpec"))
    assert "src/cfg" not in memory.mutations and "src/cfg" not in memory.conflicts
    assert len(memory.expectations) == 0 and len(memory.removals) == 0
    assert memory.removals.grace().now == 5.0 and memory.removals.seconds == 60.0
    assert len(memory.refusals) == 0

"""WorkQueue behaviour, including ports of client-go's queue_test.go and delaying_queue_test.go."""

from __future__ import annotations

import threading

import pytest

from configmirror.clock import FakeClock
from configmirror.controller.ratelimit import ItemExponentialFailureRateLimiter
from configmirror.controller.workqueue import WorkQueue
from configmirror.metrics import Metrics
from configmirror_testing.wait import wait_for


def test_readme_example_in_flight_add_marks_dirty_and_requeues_on_done() -> None:
    wq: WorkQueue[str] = WorkQueue(max_retries=2)
    wq.add("a")
    assert wq.get() == "a"
    wq.add("a")
    assert wq.get() is None
    wq.done("a")
    assert wq.get() == "a"


def test_done_with_nothing_dirty_does_not_requeue() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.add("a")
    assert wq.get() == "a"
    wq.done("a")
    assert len(wq) == 0
    assert wq.get() is None


def test_retry_gives_up_at_exactly_max_retries() -> None:
    wq: WorkQueue[str] = WorkQueue(max_retries=3)
    wq.add("a")
    outcomes = []
    for _ in range(3):
        assert wq.get() == "a"
        outcomes.append(wq.retry("a"))
        wq.done("a")
    assert outcomes == [True, True, False]
    assert wq.get() is None, "a given-up item must not be requeued"
    assert wq.num_requeues("a") == 3


def test_failure_counts_persist_across_retries_until_forget() -> None:
    wq: WorkQueue[str] = WorkQueue(max_retries=10)
    for expected in (1, 2, 3):
        wq.retry("a")
        assert wq.num_requeues("a") == expected
    wq.forget("a")
    assert wq.num_requeues("a") == 0
    assert wq.num_requeues("never-seen") == 0


def test_retry_of_in_flight_item_does_not_create_second_in_flight_copy() -> None:
    wq: WorkQueue[str] = WorkQueue(max_retries=5)
    wq.add("a")
    assert wq.get() == "a"
    assert wq.retry("a") is True
    assert wq.get() is None, "the retry went through add(): in flight, so only marked dirty"
    assert wq.in_flight() == 1
    wq.done("a")
    assert wq.get() == "a"
    assert wq.get() is None


def test_retry_with_rate_limiter_requeues_after_the_limiters_delay() -> None:
    clock = FakeClock()
    limiter = ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=100.0)
    wq: WorkQueue[str] = WorkQueue(max_retries=5, rate_limiter=limiter, clock=clock)
    assert wq.retry("a") is True
    assert wq.get() is None
    clock.step(0.999)
    assert wq.get() is None
    clock.step(0.001)
    assert wq.get() == "a"
    wq.done("a")
    assert wq.retry("a") is True  # second failure: 2 s
    clock.step(1.5)
    assert wq.get() is None
    clock.step(0.5)
    assert wq.get() == "a"


def test_max_retries_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        WorkQueue(max_retries=0)


# --- ports of client-go util/workqueue/queue_test.go -----------------------------------------


@pytest.mark.parametrize("drain", [False, True])
def test_basic_many_producers_and_consumers(drain: bool) -> None:
    """TestBasic: 50 producers, 10 consumers; every item is consumed once, adds after
    shutdown never come out, and the queue ends empty."""
    wq: WorkQueue[int] = WorkQueue()
    producers = [
        threading.Thread(target=lambda i=i: [wq.add(i * 50 + j) for j in range(50)])
        for i in range(50)
    ]
    seen: list[int] = []
    seen_lock = threading.Lock()

    def consume() -> None:
        while True:
            item = wq.get(timeout=None)
            if item is None:
                return
            with seen_lock:
                seen.append(item)
            wq.done(item)

    consumers = [threading.Thread(target=consume) for _ in range(10)]
    for t in producers + consumers:
        t.start()
    for t in producers:
        t.join(timeout=10)
        assert not t.is_alive()
    wq.shutdown_with_drain(timeout=10) if drain else wq.shutdown()
    wq.add(-1)
    for t in consumers:
        t.join(timeout=10)
        assert not t.is_alive()
    assert sorted(seen) == list(range(50 * 50)), "every item consumed, each once"
    assert len(wq) == 0


def test_len_ignores_duplicate_adds() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    wq.add("bar")
    wq.add("foo")
    assert len(wq) == 2


def test_reinsert_during_processing() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    item = wq.get()
    assert item == "foo"
    wq.add(item)
    wq.done(item)
    assert wq.get() == "foo"
    wq.done("foo")
    assert len(wq) == 0


def test_collapse_double_add_gives_one_get() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.add("bar")
    wq.add("bar")
    assert wq.get() == "bar"
    wq.done("bar")
    assert wq.get() is None


def test_fifo_order_is_kept_when_an_item_is_added_twice() -> None:
    wq: WorkQueue[str] = WorkQueue()
    for item in ("a", "b", "a", "c"):
        wq.add(item)
    assert [wq.get(), wq.get(), wq.get()] == ["a", "b", "c"]


def test_collapse_while_processing_redelivers_only_after_done() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.add("bar")
    assert wq.get() == "bar"
    wq.add("bar")
    wq.add("bar")
    assert len(wq) == 0
    wq.done("bar")
    assert len(wq) == 1
    assert wq.get() == "bar"


def test_shutdown_with_drain_waits_for_in_flight_items() -> None:
    """TestQueueDrainageUsingShutDownWithDrain: it returns once both are done, not before."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    wq.add("bar")
    foo, bar = wq.get(), wq.get()
    assert foo is not None and bar is not None
    finished: list[str] = []

    def finish() -> None:  # the workers: they finish once the drain has begun
        wait_for(lambda: wq.shutting_down, what="the drain to begin")
        for item in (foo, bar):
            finished.append(item)
            wq.done(item)

    worker = threading.Thread(target=finish)
    worker.start()
    try:
        assert wq.shutdown_with_drain(timeout=30) is True
        in_flight_when_drained = wq.in_flight()
        assert finished == ["foo", "bar"] and in_flight_when_drained == 0, \
            "the drain returned with items still in flight"
    finally:
        worker.join(timeout=10)
    assert not worker.is_alive()


def test_a_drain_ends_when_the_last_in_flight_item_is_done_even_if_it_was_dirty() -> None:
    """The item is queued again by done(), so nothing is in flight: the drain is over."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    foo = wq.get()
    assert foo is not None
    wq.add("foo")  # an event for it while it is processed: dirty
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(wq.shutdown_with_drain(timeout=60)))
    t.start()
    try:
        wait_for(lambda: wq.shutting_down, what="the drain to begin")
        wq.done(foo)
        t.join(timeout=10)  # well inside the drain's own 60 s timeout
        assert not t.is_alive() and result == [True], "the drain waited for its timeout"
    finally:
        wq.shutdown()  # releases a drain that is still waiting
        t.join(timeout=10)
    assert len(wq) == 1, "the dirty item is queued, not lost"


def test_shutdown_does_not_wait_for_in_flight_items() -> None:
    """TestNoQueueDrainageUsingShutDown."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    assert wq.get() == "foo"
    wq.shutdown()  # returns at once
    assert wq.shutting_down
    assert wq.in_flight() == 1


def test_shutdown_releases_a_drain_waiter() -> None:
    """TestForceQueueShutdownUsingShutDown."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    wq.get()
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(wq.shutdown_with_drain()))
    t.start()
    wait_for(lambda: wq.shutting_down, what="the drain to begin")
    wq.shutdown()
    t.join(timeout=5)
    assert not t.is_alive()
    assert result == [False]


def test_shutdown_with_drain_times_out() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    wq.get()
    assert wq.shutdown_with_drain(timeout=0.01) is False


def test_done_requeues_dirty_item_after_shutdown() -> None:
    """TestQueueDrainageUsingShutDownWithDrainWithDirtyItem."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add("foo")
    assert wq.get() == "foo"
    wq.add("foo")
    wq.shutdown()
    wq.done("foo")
    assert wq.get() == "foo", "queued items are still handed out after shutdown"
    wq.done("foo")
    assert wq.get(timeout=None) is None, "a blocking get returns at once after shutdown"


def test_add_after_shutdown_is_a_no_op() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.shutdown()
    wq.add("foo")
    wq.add_after("bar", 1)
    assert wq.counts() == (0, 0, 0), "nothing queued, and nothing delayed either"


def test_blocking_get_is_woken_by_add() -> None:
    wq: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(wq.get(timeout=None)))
    t.start()
    wq.add("x")
    t.join(timeout=5)
    assert not t.is_alive() and got == ["x"]


def test_done_wakes_a_blocked_get_for_the_dirty_item_it_requeues() -> None:
    """A second worker waits while the only key is in flight; the key's event arrived
    meanwhile, so done() queues it again, and must wake that worker to take it."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add("a")
    assert wq.get() == "a"
    wq.add("a")  # dirty while in flight: not queued, so it wakes nobody
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(wq.get(timeout=None)))
    t.start()
    try:
        wait_for(lambda: wq._getters == 1, what="the second worker to block in get()")
        wq.done("a")
        t.join(timeout=5)
        assert not t.is_alive() and got == ["a"], "the requeued item woke no one"
    finally:
        wq.shutdown()
        t.join(timeout=5)


def test_get_with_timeout_returns_none_when_nothing_arrives() -> None:
    wq: WorkQueue[str] = WorkQueue()
    assert wq.get(timeout=0.01) is None


def test_get_with_a_timeout_returns_an_item_that_arrives_within_it() -> None:
    wq: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(wq.get(timeout=0.5)))
    t.start()
    try:
        wait_for(lambda: wq._getters == 1, what="the getter to block")
        wq.add("x")
        t.join(timeout=5)
        assert not t.is_alive() and got == ["x"]
    finally:
        wq.shutdown()
        t.join(timeout=5)


def test_get_with_timeout_and_fake_clock_still_times_out_in_real_time() -> None:
    wq: WorkQueue[str] = WorkQueue(clock=FakeClock())
    wq.add_after("later", 60)
    assert wq.get(timeout=0.01) is None


def test_processed_items_are_released() -> None:
    """TestGarbageCollection: nothing about a finished, forgotten item stays in the queue."""
    wq: WorkQueue[str] = WorkQueue(metrics=Metrics().queue("gc"))
    wq.add("foo")
    item = wq.get()
    assert item == "foo"
    wq.retry(item)
    wq.forget(item)
    wq.done(item)
    wq.get()
    wq.done("foo")
    internals = (wq._queue, wq._dirty, wq._processing, wq._failures, wq._waiting,
                 wq._added_at, wq._started_at)
    assert all(len(part) == 0 for part in internals)


# --- ports of client-go delaying_queue_test.go (fake clock, no sleeps) ------------------------


def blocked_get(wq: WorkQueue[str]) -> tuple[threading.Thread, list[str | None]]:
    """A getter blocked in get(timeout=None), as a worker is, and what it got."""
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(wq.get(timeout=None)))
    t.start()
    return t, got


def test_delayed_item_is_absent_before_its_delay_and_present_after() -> None:
    """TestSimpleQueue."""
    clock = FakeClock()
    wq: WorkQueue[str] = WorkQueue(clock=clock)
    wq.add_after("foo", 0.05)
    assert wq.get() is None
    assert wq.delayed() == 1
    clock.step(0.06)
    assert wq.get() == "foo"
    wq.done("foo")
    assert wq.delayed() == 0


def test_delayed_add_dedups_keeping_the_earliest_time() -> None:
    """TestDeduping: a later add_after does not postpone; an earlier one brings it forward."""
    clock = FakeClock()
    wq: WorkQueue[str] = WorkQueue(clock=clock)
    wq.add_after("foo", 0.05)
    wq.add_after("foo", 0.07)
    clock.step(0.06)
    assert wq.get() == "foo"
    wq.done("foo")
    clock.step(0.02)
    assert wq.get() is None, "the later time was merged into the earlier one"

    wq.add_after("foo", 0.07)
    wq.add_after("foo", 0.05)
    clock.step(0.06)
    assert wq.get() == "foo"
    wq.done("foo")
    clock.step(0.02)
    assert wq.get() is None
    assert len(wq) == 0


def test_delayed_items_fire_in_ready_order() -> None:
    """TestAddTwoFireEarly and TestCopyShifting."""
    clock = FakeClock()
    wq: WorkQueue[str] = WorkQueue(clock=clock)
    wq.add_after("foo", 1)
    wq.add_after("bar", 0.05)
    wq.add_after("baz", 0.5)
    clock.step(0.6)
    assert [wq.get(), wq.get(), wq.get()] == ["bar", "baz", None]
    wq.add_after("foo", 0.05)  # brings foo forward from 1 s
    clock.step(0.05)
    assert wq.get() == "foo"


@pytest.mark.parametrize("delay", [0, -1])
def test_add_after_with_no_delay_adds_at_once(delay: float) -> None:
    wq: WorkQueue[str] = WorkQueue(clock=FakeClock())
    wq.add_after("foo", delay)
    assert wq.counts() == (1, 0, 0), "queued, not delayed"
    assert wq.get() == "foo"


def test_a_get_without_timeout_wakes_for_a_delayed_item_on_the_real_clock() -> None:
    """The real clock turns the item's time into the wait's timeout: nothing notifies."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add_after("soon", 0.02)
    t, got = blocked_get(wq)
    try:
        t.join(timeout=10)
        assert not t.is_alive() and got == ["soon"]
    finally:
        wq.shutdown()
        t.join(timeout=5)


def test_a_get_timeout_ends_the_wait_before_a_later_item_on_the_real_clock() -> None:
    wq: WorkQueue[str] = WorkQueue()
    wq.add_after("later", 3600)
    assert wq.get(timeout=0.01) is None


def test_a_blocked_get_wakes_when_the_fake_clock_reaches_the_delayed_item() -> None:
    clock = FakeClock()
    wq: WorkQueue[str] = WorkQueue(clock=clock)
    wq.add_after("foo", 5)
    t, got = blocked_get(wq)
    try:
        wait_for(lambda: clock.wake_times() == [1005.0], what="the getter to sleep until 5 s")
        clock.step(4.999)
        assert got == [] and wq.get() is None, "not before its time"
        clock.step(0.001)
        t.join(timeout=5)
        assert not t.is_alive() and got == ["foo"]
    finally:
        wq.shutdown()
        t.join(timeout=5)


def test_an_earlier_add_after_wakes_a_get_sleeping_until_a_later_item() -> None:
    """The getter sleeps until the first delayed item is due; an earlier one must wake it,
    or it would sleep past it (here: forever, as the clock stops short of the later one)."""
    clock = FakeClock()
    wq: WorkQueue[str] = WorkQueue(clock=clock)
    wq.add_after("late", 60)
    t, got = blocked_get(wq)
    try:
        wait_for(lambda: clock.wake_times() == [1060.0],
                 what="the getter to sleep until the late item")
        wq.add_after("soon", 1)
        clock.step(1)
        t.join(timeout=5)
        assert not t.is_alive() and got == ["soon"], "the getter slept past the earlier item"
    finally:
        wq.shutdown()
        t.join(timeout=5)


def test_a_fake_clock_step_short_of_every_delayed_item_wakes_no_getter() -> None:
    clock = FakeClock()
    wq: WorkQueue[str] = WorkQueue(clock=clock)
    wq.add_after("foo", 10)
    t, got = blocked_get(wq)
    try:
        wait_for(lambda: clock.waiters() == 1, what="the getter to wait for the clock")
        clock.step(9)
        assert clock.waiters() == 1 and got == []
    finally:
        wq.shutdown()
        t.join(timeout=5)
    assert not t.is_alive() and got == [None], "shutdown wakes the getter empty-handed"


def test_delayed_items_are_dropped_on_shutdown() -> None:
    clock = FakeClock()
    wq: WorkQueue[str] = WorkQueue(clock=clock)
    wq.add_after("foo", 1)
    wq.shutdown()
    assert wq.delayed() == 0, "nothing is left waiting (the idle probe reads this)"
    clock.step(2)
    assert wq.get() is None


# --- port of rate_limiting_queue_test.go ----------------------------------------------------


def test_rate_limited_requeues_grow_and_forget_resets() -> None:
    """TestRateLimitingQueue: 1 ms, then 2 ms per item; num_requeues 2; forget resets."""
    clock = FakeClock()
    limiter = ItemExponentialFailureRateLimiter(0.001, 1.0)
    wq: WorkQueue[str] = WorkQueue(max_retries=100, rate_limiter=limiter, clock=clock)
    wq.retry("one")
    assert wq._waiting["one"] == pytest.approx(clock.now() + 0.001)
    wq.retry("one")
    assert wq._waiting["one"] == pytest.approx(clock.now() + 0.001), "earliest time kept"
    wq.retry("two")
    assert wq._waiting["two"] == pytest.approx(clock.now() + 0.001)
    assert wq.num_requeues("one") == 2
    assert limiter.num_requeues("one") == 2
    wq.forget("one")
    assert wq.num_requeues("one") == 0
    assert limiter.num_requeues("one") == 0

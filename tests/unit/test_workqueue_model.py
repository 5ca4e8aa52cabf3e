"""The queue against a simple model (hypothesis stateful), and a threaded stress test."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from configmirror.controller.workqueue import WorkQueue
from configmirror_testing.wait import wait_for

KEYS = st.sampled_from(["a", "b", "c", "d"])
MAX_RETRIES = 3


class QueueModel(RuleBasedStateMachine):
    """The model: a list for order, a set for in-flight, a set for pending-while-in-flight."""

    def __init__(self) -> None:
        super().__init__()
        self.wq: WorkQueue[str] = WorkQueue(max_retries=MAX_RETRIES)
        self.order: list[str] = []
        self.in_flight: set[str] = set()
        self.pending: set[str] = set()
        self.failures: dict[str, int] = defaultdict(int)
        self.closed = False

    def model_add(self, key: str) -> None:
        if self.closed:
            return
        if key in self.in_flight:
            self.pending.add(key)
        elif key not in self.order:
            self.order.append(key)

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        self.wq.add(key)
        self.model_add(key)

    @rule()
    def get(self) -> None:
        got = self.wq.get()
        expected = self.order.pop(0) if self.order else None
        assert got == expected
        if got is not None:
            self.in_flight.add(got)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.in_flight)))
        self.wq.done(key)
        self.in_flight.discard(key)
        if key in self.pending:
            self.pending.discard(key)
            self.order.append(key)

    @rule(key=KEYS)
    def retry(self, key: str) -> None:
        self.failures[key] += 1
        expected = self.failures[key] < MAX_RETRIES
        assert self.wq.retry(key) is expected
        if expected:
            self.model_add(key)

    @rule(key=KEYS)
    def forget(self, key: str) -> None:
        self.wq.forget(key)
        self.failures[key] = 0

    @rule()
    def shutdown(self) -> None:
        self.wq.shutdown()
        self.closed = True

    @invariant()
    def lengths_and_counts_agree(self) -> None:
        assert len(self.wq) == len(self.order)
        assert self.wq.in_flight() == len(self.in_flight)
        for key in "abcd":
            assert self.wq.num_requeues(key) == self.failures[key]


TestQueueAgainstModel = QueueModel.TestCase
TestQueueAgainstModel.settings = settings(max_examples=200, stateful_step_count=60,
                                          deadline=None)


def test_stress_no_key_twice_in_flight_no_lost_update_bounded_retries() -> None:
    """Many producers and workers, random failures, checked for the queue's three promises."""
    keys = [f"k{i}" for i in range(20)]
    max_retries = 4
    wq: WorkQueue[str] = WorkQueue(max_retries=max_retries)
    rng_lock = threading.Lock()
    rng = random.Random(7)
    state_lock = threading.Lock()
    in_flight: set[str] = set()
    violations: list[str] = []
    last_added: dict[str, int] = {}       # key -> sequence number of its latest add
    processed_after: dict[str, int] = {}  # key -> latest add seq seen when a worker started it
    attempts: dict[str, int] = defaultdict(int)  # consecutive failed attempts since success
    seq = iter(range(10**9))

    def produce() -> None:
        for _ in range(2000):
            with rng_lock:
                key = rng.choice(keys)
            with state_lock:
                last_added[key] = next(seq)
                wq.add(key)

    def work() -> None:
        while (key := wq.get(timeout=None)) is not None:
            with state_lock:
                if key in in_flight:
                    violations.append(f"{key} in flight twice")
                in_flight.add(key)
                processed_after[key] = last_added[key]
            with rng_lock:
                fail = rng.random() < 0.3
            with state_lock:
                in_flight.discard(key)
                if fail:
                    attempts[key] += 1
                    if attempts[key] > max_retries:
                        violations.append(f"{key} attempted beyond max_retries")
            if not fail or not wq.retry(key):
                with state_lock:
                    attempts[key] = 0
                wq.forget(key)
            wq.done(key)

    producers = [threading.Thread(target=produce) for _ in range(4)]
    workers = [threading.Thread(target=work) for _ in range(8)]
    for t in producers + workers:
        t.start()
    for t in producers:
        t.join(timeout=30)
        assert not t.is_alive()
    # Let workers finish everything queued, then stop them.
    wait_for(lambda: wq.counts() == (0, 0, 0), timeout=30, interval=0.005,
             what="the workers to finish everything queued")
    wq.shutdown()
    for t in workers:
        t.join(timeout=10)
        assert not t.is_alive()
    assert violations == []
    # No lost update: every key's last add was followed by a processing that saw it.
    for key, seqno in last_added.items():
        assert processed_after[key] == seqno, f"{key}: its last add was never processed"

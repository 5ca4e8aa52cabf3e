"""The Prometheus queue metrics: client-go's names and exact values (port of TestMetrics)."""

from __future__ import annotations

import pytest

from configmirror.clock import FakeClock
from configmirror.controller.workqueue import WorkQueue
from configmirror.metrics import Count, Metrics, Observer


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    value = metrics.registry.get_sample_value(name, labels or {"name": "test"})
    return value


def test_metrics_exact_values_and_duplicate_adds_counted_once() -> None:
    clock = FakeClock()
    metrics = Metrics()
    wq: WorkQueue[str] = WorkQueue(clock=clock, metrics=metrics.queue("test"))
    wq.add("foo")
    assert sample(metrics, "workqueue_adds_total") == 1
    assert sample(metrics, "workqueue_depth") == 1
    clock.step(0.025)
    assert wq.get() == "foo"
    assert sample(metrics, "workqueue_depth") == 0
    assert sample(metrics, "workqueue_queue_duration_seconds_sum") == pytest.approx(0.025)
    wq.add("foo")
    wq.add("foo")  # duplicate while dirty: not counted
    assert sample(metrics, "workqueue_adds_total") == 2
    clock.step(0.5)
    assert sample(metrics, "workqueue_unfinished_work_seconds") == pytest.approx(0.5)
    assert sample(metrics, "workqueue_longest_running_processor_seconds") == pytest.approx(0.5)
    wq.done("foo")
    assert sample(metrics, "workqueue_work_duration_seconds_sum") == pytest.approx(0.5)
    assert sample(metrics, "workqueue_unfinished_work_seconds") == 0
    assert wq.get() == "foo"
    wq.done("foo")
    assert sample(metrics, "workqueue_depth") == 0


def test_retries_metric_counts_delayed_requeues() -> None:
    metrics = Metrics()
    wq: WorkQueue[str] = WorkQueue(clock=FakeClock(), metrics=metrics.queue("test"))
    wq.add_after("a", 1)
    wq.add_after("b", 0)
    assert sample(metrics, "workqueue_retries_total") == 2


def test_metrics_of_two_queues_are_labelled_apart() -> None:
    metrics = Metrics()
    one: WorkQueue[str] = WorkQueue(metrics=metrics.queue("one"))
    WorkQueue[str](metrics=metrics.queue("two"))
    one.add("x")
    assert sample(metrics, "workqueue_depth", {"name": "one"}) == 1
    assert sample(metrics, "workqueue_depth", {"name": "two"}) == 0


@pytest.mark.parametrize("amount", [0.0, 1e-8, 3e-8, 1e-3, 0.0999, 0.1, 0.25, 7.0, 999.0,
                                    1000.0, 1e9])
def test_observer_counts_as_the_histogram_does(amount: float) -> None:
    """The bisecting Observer puts a value in the bucket prometheus_client's own observe
    does, a bound itself included, and adds it to the same sum."""
    theirs, ours = Metrics(), Metrics()
    theirs.queue_latency.labels("test").observe(amount)
    Observer(ours.queue_latency.labels("test")).observe(amount)
    theirs.reconcile_time.labels("test").observe(amount)
    Observer(ours.reconcile_time.labels("test")).observe(amount)
    assert _histograms(ours) == _histograms(theirs)
    buckets = [s for m in ours.registry.collect() for s in m.samples
               if s.name == "workqueue_queue_duration_seconds_bucket" and s.value == 1]
    assert buckets, "the value reached no bucket"


def _histograms(metrics: Metrics) -> list[tuple[str, dict[str, str], float]]:
    """Every histogram sample but the series' creation time."""
    return [(s.name, s.labels, s.value) for m in metrics.registry.collect()
            if m.type == "histogram" for s in m.samples if not s.name.endswith("_created")]


def test_count_counts_as_the_counter_does() -> None:
    """A Count's increments are the series' own: the same value, exposed the same way."""
    theirs, ours = Metrics(), Metrics()
    count = Count(ours.replica_writes.labels("created", "configmaps"))
    for _ in range(3):
        theirs.replica_writes.labels("created", "configmaps").inc()
        count.inc()
    assert ours.child(ours.replica_writes, "created", "configmaps") is not None
    labels = {"action": "created", "resource": "configmaps"}
    value = ours.registry.get_sample_value("configmirror_replica_writes_total", labels)
    assert value == theirs.registry.get_sample_value("configmirror_replica_writes_total",
                                                     labels) == 3


def test_count_refuses_a_counter_with_labels_unset() -> None:
    with pytest.raises(ValueError):
        Count(Metrics().replica_writes)

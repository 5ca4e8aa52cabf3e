"""Prometheus metrics, named as client-go and controller-runtime name them so dashboards work."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# controller-runtime's buckets for queue and work durations: 10 ns .. 1000 s.
_QUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(12))


class _InFlightCollector(Collector):
    """Computes unfinished-work and longest-running gauges at scrape time (no ticker thread)."""

    def __init__(self) -> None:
        self._sources: dict[str, Callable[[], list[float]]] = {}
        self._lock = threading.Lock()

    def add(self, name: str, ages: Callable[[], list[float]]) -> None:
        with self._lock:
            self._sources[name] = ages

    def collect(self) -> Iterator[GaugeMetricFamily]:
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress that has not been observed by work_duration.",
            labels=["name"],
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest running processor for the queue has been running.",
            labels=["name"],
        )
        with self._lock:
            sources = list(self._sources.items())
        for name, ages_of in sources:
            ages = ages_of()
            unfinished.add_metric([name], sum(ages))
            longest.add_metric([name], max(ages, default=0.0))
        yield unfinished
        yield longest


class _RequestCollector(Collector):
    """API requests by verb, resource and status code, read from a counter source at scrape
    time (status 0: no answer)."""

    def __init__(self, counts: Callable[[], dict[tuple[str, str, int], int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("configmirror_api_requests",
                                     "Requests sent to the API server",
                                     labels=["verb", "resource", "code"])
        for (verb, resource, code), n in sorted(self._counts().items()):
            family.add_metric([verb, resource, str(code)], n)
        yield family


class _PendingCollector(Collector):
    """`configmirror_work_pending{state}`: work not finished yet, from one snapshot, so a
    scrape can tell "idle" without racing between two gauges."""

    def __init__(self, pending: Callable[[], dict[str, int]]) -> None:
        self._pending = pending

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("configmirror_work_pending",
                                   "Work not finished yet, by state (one consistent snapshot)",
                                   labels=["state"])
        for state, n in self._pending().items():
            family.add_metric([state], n)
        yield family


class _SourceCollector(Collector):
    """`configmirror_source_replicas{kind, source, state}` (--source-metrics): each source's
    replicas by state, worked out from its plan at scrape time."""

    def __init__(self, plans: Callable[[], Iterator[tuple[str, str, dict[str, int]]]]) -> None:
        self._plans = plans

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "configmirror_source_replicas", "Replicas of each source by state: desired "
            "(targets), in_sync, pending (writes to make), conflict (places it cannot have)",
            labels=["kind", "source", "state"])
        for kind, source, counts in self._plans():
            for state, n in counts.items():
                family.add_metric([kind, source, state], n)
        yield family


class Metrics:
    """Every metric configmirror exports, in one registry (one per process, or one per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # Work queue (client-go names).
        self.queue_depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"],
                                 registry=r)
        self.queue_adds = Counter("workqueue_adds", "Total number of adds handled by workqueue",
                                  ["name"], registry=r)
        self.queue_latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name"], buckets=_QUEUE_BUCKETS, registry=r)
        self.queue_work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name"], buckets=_QUEUE_BUCKETS, registry=r)
        self.queue_retries = Counter("workqueue_retries", "Total number of retries handled by "
                                     "workqueue", ["name"], registry=r)
        self._in_flight = _InFlightCollector()
        r.register(self._in_flight)

        # Informers.
        self.informer_relists = Counter(
            "configmirror_informer_relists", "Full LISTs made by an informer", ["resource"],
            registry=r)
        self.informer_watch_restarts = Counter(
            "configmirror_informer_watch_restarts", "Watches re-opened (stream end or error)",
            ["resource"], registry=r)
        self.informer_events = Counter(
            "configmirror_informer_events", "Watch events received, by type",
            ["resource", "type"], registry=r)
        self.informer_silent_watches = Counter(
            "configmirror_informer_silent_watches",
            "Watches found dead: silent past the server's bookmark period or their timeout, "
            "or behind a probe", ["resource"], registry=r)
        self.informer_watch_probes = Counter(
            "configmirror_informer_watch_probes",
            "Probe watches made to check a silent watch, by what they found",
            ["resource", "result"], registry=r)
        self.informer_last_event_age = Gauge(
            "configmirror_informer_last_event_age_seconds",
            "Seconds since the informer last received a watch event", ["resource"], registry=r)

        # Controller (controller-runtime names).
        self.reconcile_total = Counter(
            "controller_runtime_reconcile", "Total number of reconciliations per controller",
            ["controller", "result"], registry=r)
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors", "Total number of reconciliation errors per "
            "controller", ["controller"], registry=r)
        self.reconcile_panics = Counter(
            "controller_runtime_reconcile_panics", "Total number of reconciliations that raised "
            "an unexpected exception", ["controller"], registry=r)
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per "
            "controller", ["controller"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.active_workers = Gauge(
            "controller_runtime_active_workers", "Number of currently used workers per "
            "controller", ["controller"], registry=r)
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent "
            "reconciles per controller", ["controller"], registry=r)
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors", "Total number of terminal "
            "reconciliation errors per controller", ["controller"], registry=r)
        self.worker_changes = Counter(
            "configmirror_worker_changes", "Reconciles that wrote to the API server, by worker "
            "thread (how evenly the work spreads)", ["controller", "worker"], registry=r)
        self.reconciles = Counter(
            "configmirror_reconciles", "Reconciles by the role of their key (source: plans a "
            "source; target: decides one object)", ["role"], registry=r)
        self.events_dropped = Counter(
            "configmirror_events_dropped", "Events dropped because the recorder's queue was "
            "full", registry=r)
        self.given_up = Counter(
            "configmirror_reconcile_given_up", "Keys given up after --max-retries failures",
            ["controller"], registry=r)

        # Replication.
        self.replica_writes = Counter(
            "configmirror_replica_writes", "Replica writes by action (create, update, delete, "
            "release, adopt; admitted: the mark of what admission changed) and resource "
            "(configmaps, secrets)", ["action", "resource"], registry=r)
        self.leader = Gauge("configmirror_leader", "1 while this process holds the lease",
                            registry=r)
        self.api_server_unavailable = Gauge(
            "configmirror_api_server_unavailable", "1 while the API server does not answer: "
            "keys wait for it, or an informer retries its list or watch", registry=r)
        self.dead_workers = Gauge(
            "configmirror_dead_workers", "Worker threads that died (0 on a standby, whose "
            "workers never started); /healthz fails while any has", registry=r)
        self.pending_removals = Gauge(
            "configmirror_pending_removals", "Replicas whose removal (delete or release) waits "
            "out --delete-grace", registry=r)

        # Member clusters: one series per cluster of the inventory, removed with it
        # (forget_cluster).
        self.cluster_token_expiry = Gauge(
            "configmirror_cluster_token_expiry_timestamp_seconds", "When the member cluster's "
            "ServiceAccount token expires, in Unix seconds (renewed once a third of its "
            "lifetime is left)", ["cluster"], registry=r)
        self.cluster_reachable = Gauge(
            "configmirror_cluster_reachable", "1 while the member cluster's API server answers, "
            "0 while it does not", ["cluster"], registry=r)
        self.cluster_replica_writes = Counter(
            "configmirror_cluster_replica_writes", "Replica writes into member clusters, by "
            "cluster and action (the actions of configmirror_replica_writes_total)",
            ["cluster", "action"], registry=r)

    def forget_cluster(self, name: str) -> None:
        """Remove member cluster `name`'s series from every metric labelled by cluster (it
        left the inventory), and the children `child` cached for them: a series a caller
        touches afterwards starts again from zero."""
        for metric in (self.cluster_token_expiry, self.cluster_reachable,
                       self.cluster_replica_writes):
            position = list(metric._labelnames).index("cluster")
            with metric._lock:
                labelled = [labels for labels in metric._metrics if labels[position] == name]
            for labels in labelled:
                metric.remove(*labels)
            for key in [k for k in list(self._children)
                        if k[0] == id(metric) and k[1][position:position + 1] == (name,)]:
                self._children.pop(key, None)

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)` of a Counter, looked up once per label set, as a `Count`.
        labels() takes a lock and builds its key on every call, which costs more than the
        increment it serves on a per-write path. The series still appears on its first use,
        as with labels()."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children.setdefault(key, Count(metric.labels(*labels)))
        return found

    def count_requests(self, counts: Callable[[], dict[tuple[str, str, int], int]]) -> None:
        """Export `configmirror_api_requests_total` from a source like Kube.counts."""
        self.registry.register(_RequestCollector(counts))

    def observe_sources(self, plans: Callable[[], Iterator[tuple[str, str, dict[str, int]]]]
                        ) -> None:
        """Export `configmirror_source_replicas` from (kind, source, state -> count)."""
        self.registry.register(_SourceCollector(plans))

    def observe_pending(self, pending: Callable[[], dict[str, int]]) -> None:
        """Export `configmirror_work_pending` from a snapshot function (state -> count)."""
        self.registry.register(_PendingCollector(pending))

    def queue(self, name: str) -> PrometheusQueueMetrics:
        """QueueMetrics for the queue called `name`."""
        return PrometheusQueueMetrics(self, name)


class Observer:
    """`observe` for one series of a Histogram (a `labels()` child), its bucket found by
    bisection: prometheus_client compares the value with each bound in turn, a dozen steps
    for controller-runtime's queue buckets, three times per write. The same counts, sum and
    exposition (tests/unit/test_workqueue_metrics.py compares the two)."""

    def __init__(self, series: Any) -> None:
        self._bounds = list(series._upper_bounds)  # ascending, +Inf last
        self._buckets = series._buckets
        self._sum = series._sum

    def observe(self, amount: float) -> None:
        self._sum.inc(amount)
        self._buckets[bisect_left(self._bounds, amount)].inc(1)


class Count:
    """`inc` for one series of a Counter (a `labels()` child), by one: prometheus_client
    checks on every increment that the series is observable, the amount not negative and
    whether an exemplar came, all settled once here. The same value and exposition
    (tests/unit/test_workqueue_metrics.py)."""

    __slots__ = ("_value",)

    def __init__(self, series: Any) -> None:
        series.inc(0)  # its checks, once (a parent with labels is refused here)
        self._value = series._value

    def inc(self) -> None:
        self._value.inc(1)


class PrometheusQueueMetrics:
    """The work queue's QueueMetrics backed by Prometheus, labelled by queue name."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._metrics = metrics
        self._name = name
        self._depth = metrics.queue_depth.labels(name)
        self._adds = Count(metrics.queue_adds.labels(name))
        self._latency = Observer(metrics.queue_latency.labels(name))
        self._work = Observer(metrics.queue_work_duration.labels(name))
        self._retries = metrics.queue_retries.labels(name)

    def added(self) -> None:
        self._adds.inc()

    def taken(self, queued_seconds: float) -> None:
        self._latency.observe(queued_seconds)

    def finished(self, work_seconds: float) -> None:
        self._work.observe(work_seconds)

    def retried(self) -> None:
        self._retries.inc()

    def observe_in_flight(self, ages: Callable[[], list[float]]) -> None:
        self._metrics._in_flight.add(self._name, ages)

    def observe_depth(self, depth: Callable[[], int]) -> None:
        # Read at scrape time: the same number client-go's inc/dec keeps, with no lock taken
        # twice per key.
        self._depth.set_function(depth)

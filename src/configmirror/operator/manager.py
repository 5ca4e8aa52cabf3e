"""Wires the operator together and runs it until a signal: informers -> queue -> controller.

Start-up, one component at a time (`lifecycle.Components`): HTTP probes and metrics, the
outage probe, the Event recorder (idle until a worker records one), the informers (standbys
keep them warm too), then, once the caches have synced, the leader elector, and once this
process leads, the policy publisher and the workers. Watch events become keys through
`routing`; the object informer resyncs its cache on its own thread.
Shutdown (SIGTERM/SIGINT): the components in reverse, within one deadline: stop taking keys
and let in-flight reconciles finish within the drain timeout, withdraw the policy, release the
lease, stop the informers, write the Events still queued, stop the HTTP servers, exit 0. What
has not stopped by the deadline is named in the log and left behind.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from collections.abc import Callable, Iterator

from configmirror.client.events import EventRecorder
from configmirror.client.kube import Kube
from configmirror.client.leaderelection import LeaderElector
from configmirror.client.outage import Outage, readyz
from configmirror.clock import Clock, RealClock
from configmirror.controller.controller import Controller
from configmirror.controller.ratelimit import default_controller_rate_limiter
from configmirror.controller.reconcile import Result
from configmirror.controller.servergate import ServerGate
from configmirror.controller.workqueue import WorkQueue
from configmirror.lifecycle import Components
from configmirror.metrics import Metrics
from configmirror.operator.caches import ClusterInformers, discovery, replicated_kinds
from configmirror.operator.fleet import Fleet
from configmirror.operator.memory import Memory
from configmirror.operator.policy import Publisher, home
from configmirror.operator.probes import Probes
from configmirror.operator.replicator import Replicator
from configmirror.operator.settings import Settings
from configmirror.replication.model import CachedObject, Key, Namespace
from configmirror.replication.routing import namespace_keys, object_keys, resync_keys
from configmirror.replication.spec import ReplicaRules
from configmirror.vocabulary import CONFIGMAP, Kind

log = logging.getLogger(__name__)
SYNC_TIMEOUT = 120.0
# What a shutdown may take beyond --drain-timeout: withdrawing the policy and releasing the
# lease (a few requests of at most 5 s each), stopping the watches, writing the Events still
# queued. 25 s + 10 s stays under the pods' terminationGracePeriodSeconds (40 s), with time
# for the interpreter to exit.
STOP_MARGIN = 10.0


class Manager:
    """Owns every thread of the operator: it starts them, stops them and joins them."""

    def __init__(self, settings: Settings, kube: Kube, metrics: Metrics | None = None,
                 clock: Clock | None = None) -> None:
        self.settings = settings
        self.kube = kube
        self.metrics = metrics or Metrics()
        self.metrics.count_requests(kube.counts)
        self._clock = clock or RealClock()
        self.queue: WorkQueue[Key] = WorkQueue(
            max_retries=settings.max_retries,
            rate_limiter=default_controller_rate_limiter(self._clock),
            clock=self._clock, metrics=self.metrics.queue("configmirror"))
        # Whether the API server answers, as every part that waits for it sees it.
        self.outage = Outage(readyz(kube), self._clock)
        self.recorder = EventRecorder(kube, on_dropped=self.metrics.events_dropped.inc,
                                      outage=self.outage)
        rules = ReplicaRules.from_flags(settings.drop_labels, settings.drop_annotations,
                                        settings.bindable_roles)
        self.cache = ClusterInformers(
            kube, replicated_kinds(settings, discovery(kube)), rules,
            self._on_object, self._on_namespace, self.metrics, self._clock,
            settings.resync_period, self._server_answered, outage=self.outage)
        # Member clusters (--member-clusters): each with machinery of its own, run by the
        # leader; a source's key reaches every member through home_keys.
        self.fleet: Fleet | None = None
        if settings.member_clusters:
            self.fleet = Fleet(kube, settings, self.cache, rules, self.recorder, self.metrics,
                               self._clock, self.outage)
        self.informers = self.cache.informers
        served = frozenset(kind.pull_name for kind in self.cache.kinds)
        self.replicators: dict[Kind, Replicator] = {}
        for kind, cached in self.cache.kinds.items():
            memory = Memory(cached.watermark, settings.delete_grace, self._clock)
            for informer in cached.informers:
                informer.recognise(memory.expectations)  # our writes' own watch events
            self.replicators[kind] = Replicator(
                kube, cached.caches, cached.scope, self.recorder, memory,
                metrics=self.metrics, dry_run=settings.dry_run, watching=cached.watching,
                names=cached.names,
                # ConfigMaps are always replicated: their replicator also says which pulls
                # no kind can serve.
                unserved=served if kind is CONFIGMAP else None)
        self.metrics.pending_removals.set_function(
            lambda: sum(r.pending_removals() for r in self.replicators.values()))
        # Keys that meet an API server that does not answer wait for it, uncounted.
        self.gate: ServerGate[Key] = ServerGate("configmirror", self._reconcile,
                                                self.queue.add, self._clock,
                                                outage=self.outage)
        self.controller: Controller[Key] = Controller(
            "configmirror", self.queue, self.gate.reconcile, settings.workers, self.metrics,
            self.recorder)
        self.metrics.observe_pending(self._pending)
        if settings.source_metrics:  # one series per source and state: off unless asked
            self.metrics.observe_sources(self._source_states)
        self.metrics.api_server_unavailable.set_function(
            lambda: int(self.gate.in_outage() or any(i.failing() for i in self.informers)))
        self.metrics.dead_workers.set_function(
            lambda: self.settings.workers - self.controller.alive_workers()
            if self._workers_started else 0)
        # Random: two processes on one host (or with one pod name) must differ.
        identity = f"{socket.gethostname()}_{secrets.token_hex(4)}"
        self.elector: LeaderElector | None = None
        if settings.leader_elect:
            self.elector = LeaderElector(
                kube, settings.leader_election_namespace, settings.leader_election_id,
                identity=identity, on_started_leading=lambda: self.metrics.leader.set(1),
                on_stopped_leading=self._lost_leadership, outage=self.outage)
        # What the leader decides with, for plan, status and wait (not in a dry run: it acts
        # on nothing, so its policy is in force nowhere).
        self.publisher: Publisher | None = None
        if (published_in := home(settings)) is not None and not settings.dry_run:
            self.publisher = Publisher(kube, settings, published_in, identity, self._clock)
        self.probes = Probes(settings.health_probe_bind_address, settings.metrics_bind_address,
                             self.healthy, self.ready, self.metrics.registry)
        # Every component started so far, in order: stopped in reverse, within one deadline.
        self.components = Components(self._clock)
        self._lost = threading.Event()
        self._workers_started = False
        # Set just before the first worker starts. Until then every source's key waits in the
        # queue, to be planned against caches that hold everything listed so far.
        self._planning = threading.Event()

    # -- event handlers: map every change to the keys it may affect -----------------------

    def _on_object(self, kind: Kind, old: CachedObject | None,
                   new: CachedObject | None) -> None:
        replicator = self.replicators[kind]
        if new is not None and replicator.echo(new):
            # The watch delivering a replica exactly as a worker just wrote it: that worker
            # has reconciled the key, and a change since would be another version. Waking
            # it again would be a reconcile with nothing to do for every write (half the
            # workers' CPU in a fan-out; docs/benchmarks.md).
            return
        caches = self.cache.kinds[kind].caches
        if new is not None and (old is new or (old is None and not self._planning.is_set())):
            # The periodic resync (the informer's (obj, obj)), or an object listed before any
            # worker runs: each source's plan checks its replicas, so they need no key of
            # their own (routing.resync_keys).
            keys = resync_keys(kind, new, caches.source, caches.sources_named)
        else:
            keys = object_keys(kind, old, new, caches.sources_named)
        for key in keys:
            self.queue.add(key)
        if self.fleet is not None:
            self.fleet.home_keys(keys)

    def _on_namespace(self, old: Namespace | None, new: Namespace | None) -> None:
        for kind, cached in self.cache.kinds.items():
            caches = cached.caches
            keys = namespace_keys(kind, old, new, caches.sources(), caches.namespace,
                                  cached.scope)
            for key in keys:
                self.queue.add(key)
            if self.fleet is not None:
                self.fleet.home_keys(keys)

    def _reconcile(self, key: Key) -> Result:
        self.metrics.child(self.metrics.reconciles, key.role).inc()
        return self.replicators[key.kind].reconcile(key)

    def _server_answered(self) -> None:
        self.gate.answered()  # an informer reconnected: no key need wait for the server

    def _source_states(self) -> Iterator[tuple[str, str, dict[str, int]]]:
        for kind, replicator in self.replicators.items():
            for plan in replicator.plans():
                yield kind.name, plan.source, {
                    "desired": len(plan.targets), "in_sync": plan.targets_in_sync,
                    "pending": len(plan.actions), "conflict": len(plan.conflicts)}

    def _pending(self) -> dict[str, int]:
        """Work not finished yet, for configmirror_work_pending (the idle probe)."""
        queued, in_flight, delayed = self.queue.counts()
        return {"queued": queued, "in_flight": in_flight, "delayed": delayed,
                "waiting_for_server": self.gate.waiting(),
                "events": self.recorder.pending(),
                "member_clusters": self.fleet.pending() if self.fleet is not None else 0,
                "notifications": sum(i.pending() for i in self.informers)}

    # -- run --------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        """Run until `stop` is set (or leadership is lost), then stop within the shutdown
        deadline (`shutdown_timeout`). Returns the exit code."""
        try:
            # Stopped in reverse, so the order says what a shutdown does first: the recorder
            # writes its last Events only after the lease is released (a standby need not
            # wait for them), and the policy is withdrawn before the lease is (the next
            # leader publishes its own).
            self.components.start("probes", self.probes)
            self.components.start("outage probe", self.outage)
            self.components.start("event recorder", self.recorder)
            self.components.start("informers", self.cache)
            if not self._wait(self.cache.has_synced, stop, SYNC_TIMEOUT):
                if not stop.is_set():
                    log.error("caches did not sync within %.0f s", SYNC_TIMEOUT)
                    return 1
                return 0
            log.info("caches synced: %s, %d namespaces", ", ".join(
                f"{len(c.caches.objects)} {kind.plural}" for kind, c in self.cache.kinds.items()),
                len(self.cache.namespaces))
            if self.elector is not None:
                self.components.start("leader election", self.elector)
                log.info("waiting to become leader (lease %s/%s)",
                         self.settings.leader_election_namespace,
                         self.settings.leader_election_id)
                if not self._wait(self.elector.is_leader, stop, None):
                    return 0
            else:
                self.metrics.leader.set(1)  # no election: this process is the one that writes
            if self.publisher is not None:
                self.components.start("policy publisher", self.publisher)
            if self.fleet is not None:
                self.components.start("member clusters", self.fleet)
            self._planning.set()  # from here on, an added replica wakes its own key
            # The drain gets --drain-timeout, and leaves STOP_MARGIN to the rest.
            self.components.start("workers", self.controller, leave=STOP_MARGIN)
            self._workers_started = True
            log.info("started %d workers%s", self.settings.workers,
                     " (dry run: no writes)" if self.settings.dry_run else "")
            self._wait(self._lost.is_set, stop, None)
            return 1 if self._lost.is_set() else 0
        finally:
            self._shutdown()

    @property
    def shutdown_timeout(self) -> float:
        """The most a shutdown takes: the drain, and STOP_MARGIN for everything else."""
        return self.settings.drain_timeout + STOP_MARGIN

    def _shutdown(self) -> None:
        started = self._clock.now()
        if not self._workers_started:
            self.queue.shutdown()  # no worker to drain it
        late = self.components.stop(self.shutdown_timeout)
        self.kube.close()
        if not late:
            log.info("stopped in %.1f s", self._clock.now() - started)

    def _lost_leadership(self) -> None:
        self.metrics.leader.set(0)
        self._lost.set()

    def _wait(self, condition: Callable[[], bool], stop: threading.Event,
              timeout: float | None) -> bool:
        """Poll `condition` until it holds (True), `stop` is set or `timeout` seconds of the
        clock pass (False)."""
        deadline = None if timeout is None else self._clock.now() + timeout
        while not condition():
            if stop.is_set() or (deadline is not None and self._clock.now() > deadline):
                return False
            stop.wait(0.05)
        return True

    # -- probes and metrics -------------------------------------------------------------------

    def healthy(self) -> bool:
        """Live: no worker thread has died."""
        return not self._workers_started or \
            self.controller.alive_workers() == self.settings.workers

    def ready(self) -> bool:
        """Ready: caches synced (a standby is ready too: it can take over at once)."""
        return self.cache.has_synced()

"""Member clusters: the inventory an admin writes, and one set of machinery per member.

With --member-clusters the operator watches the Secrets labelled configmirror.io/cluster in
its own namespace (replication.clusters says what one holds). Each valid one is a
`MemberCluster`: its own client (connections, client-side rate limit), outage view, informers
of its namespaces and of the replicated kinds, work queue, server gate and workers. A member
that is down, slow, silently partitioned or refusing therefore holds back no other cluster's
replicas, and a key waiting for its server spends no retry. Its sources are the home
cluster's: a source's change wakes its key in every member (`Fleet.home_keys`).

The fleet's own thread applies the inventory (a member added, changed or removed takes
effect without a restart; a Secret that cannot be used gets a Warning Event `InvalidCluster`
and its cluster's replicas stay as they are), probes each member (metrics, and a Warning
`ClusterUnreachable` once per outage of credentials), and renews each member's token before a
third of its lifetime is left, writing it back into the Secret. A member whose Secret is
deleted is no longer managed: its replicas stay, as on uninstall.
"""

from __future__ import annotations

import base64
import logging
import threading
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from configmirror import __version__
from configmirror.client.events import ClusterRecorder, EventRecorder
from configmirror.client.informer import Informer
from configmirror.client.kube import ApiError, ConfigError, Kube, configuration_from_text
from configmirror.client.outage import Outage, readyz
from configmirror.client.store import Store
from configmirror.client.tokens import renewal_due, request_token, token_times, with_token
from configmirror.clock import Clock, RealClock
from configmirror.controller.controller import Controller
from configmirror.controller.ratelimit import default_controller_rate_limiter
from configmirror.controller.reconcile import Result
from configmirror.controller.servergate import ServerGate
from configmirror.controller.workqueue import WorkQueue
from configmirror.lifecycle import Deadline, OwnedThread
from configmirror.metrics import Metrics
from configmirror.operator.caches import ClusterInformers, member_kinds
from configmirror.operator.memory import Memory
from configmirror.operator.replicator import Replicator
from configmirror.operator.settings import Settings
from configmirror.replication.clusters import (
    CLUSTER_LABEL,
    INVALID_CLUSTER,
    MEMBER_ACCOUNT,
    MEMBER_NAMESPACE,
    Member,
    inventory,
)
from configmirror.replication.model import (
    SOURCE,
    CachedObject,
    Key,
    Namespace,
    source_key,
)
from configmirror.replication.routing import namespace_keys, object_keys, resync_keys
from configmirror.replication.spec import ReplicaRules
from configmirror.vocabulary import SECRETS, Kind, ObjectRef

log = logging.getLogger(__name__)

CHECK_EVERY = 5.0          # seconds between the fleet thread's probes and token checks
PROBE_TIMEOUT = 5.0        # a member's probe (GET /api) waits at most this
MEMBER_STOP = 10.0         # a replaced or removed member's machinery stops within this
UNREACHABLE = "ClusterUnreachable"
RENEWAL_FAILED = "TokenRenewalFailed"


class MemberCluster:
    """One member cluster's client, caches, queue, gate and workers (start, stop)."""

    def __init__(self, member: Member, home: ClusterInformers, settings: Settings,
                 rules: ReplicaRules, recorder: EventRecorder, metrics: Metrics,
                 clock: Clock) -> None:
        """Raises ConfigError when the member's kubeconfig cannot be loaded."""
        self.member = member
        self.name = member.name
        self._clock = clock
        configuration = configuration_from_text(member.kubeconfig, f"cluster {member.name}",
                                                settings.workers + 4)
        self.kube = Kube(configuration, user_agent=f"configmirror/{__version__}",
                         qps=settings.kube_api_qps, burst=settings.kube_api_burst)
        self.outage = Outage(readyz(self.kube), clock)
        kinds = member_kinds(home, member.name, member.labels, MEMBER_NAMESPACE)
        self.cache = ClusterInformers(
            self.kube, kinds, rules, self._on_object, self._on_namespace, None, clock,
            settings.resync_period, self._answered, outage=self.outage, home=home,
            home_name=settings.cluster_name)
        label = f"cluster-{member.name}"
        self.queue: WorkQueue[Key] = WorkQueue(
            max_retries=settings.max_retries,
            rate_limiter=default_controller_rate_limiter(clock), clock=clock,
            metrics=metrics.queue(label))
        self.recorder = ClusterRecorder(recorder, member.name)
        self.replicators: dict[Kind, Replicator] = {}
        for kind, cached in self.cache.kinds.items():
            memory = Memory(cached.watermark, settings.delete_grace, clock)
            for informer in cached.informers:
                informer.recognise(memory.expectations)
            self.replicators[kind] = Replicator(
                self.kube, cached.caches, cached.scope, self.recorder, memory, metrics=metrics,
                dry_run=settings.dry_run, watching=cached.watching, names=cached.names,
                reports_sources=False, cluster=member.name)
        self.gate: ServerGate[Key] = ServerGate(label, self._reconcile, self.queue.add, clock,
                                                outage=self.outage)
        self.controller: Controller[Key] = Controller(label, self.queue, self.gate.reconcile,
                                                      settings.workers, metrics, self.recorder)
        self._stopping = threading.Event()
        self._planning = threading.Event()  # set when the workers start (Manager's rule)
        self._starter: OwnedThread | None = None
        self._workers = False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Connect: the informers list and watch; the workers start once they have synced,
        with every home source's key queued."""
        self.outage.start()
        self.cache.start()
        self._starter = OwnedThread(f"cluster-{self.name}", self._start_workers)
        self._starter.start()

    def _start_workers(self) -> None:
        while not self.cache.has_synced():
            if self._stopping.wait(0.05):
                return
        for kind, cached in self.cache.kinds.items():
            for source in cached.caches.sources():
                self.queue.add(source_key(kind, source.namespace, source.name))
        self._planning.set()
        self.controller.start()
        self._workers = True
        log.info("cluster %s: caches synced (%d namespaces); workers started", self.name,
                 len(self.cache.namespaces))

    def stop(self, timeout: float = MEMBER_STOP) -> bool:
        """Stop everything it started, within `timeout` seconds; True once all have ended."""
        deadline = Deadline(timeout, self._clock)
        self._stopping.set()
        ended = self._starter is None or self._starter.join(deadline.left())
        if self._workers:
            ended = self.controller.stop(deadline.left()) and ended
        else:
            self.queue.shutdown()
        ended = self.cache.stop(deadline.left()) and ended
        ended = self.outage.stop(deadline.left()) and ended
        self.kube.close()
        return ended

    def synced(self) -> bool:
        return self._workers

    def use_token(self, member: Member, token: str) -> None:
        """Go on with a renewed token: every request from the next on carries it."""
        self.kube.use_token(token)
        self.member = member

    # -- keys -------------------------------------------------------------------------------

    def add(self, key: Key) -> None:
        """A home source's key, to plan here too."""
        self.queue.add(key)

    def _on_object(self, kind: Kind, old: CachedObject | None,
                   new: CachedObject | None) -> None:
        replicator = self.replicators[kind]
        if new is not None and replicator.echo(new):
            return
        caches = self.cache.kinds[kind].caches
        if new is not None and (old is new or (old is None and not self._planning.is_set())):
            keys = resync_keys(kind, new, caches.source, caches.sources_named, home=False)
        else:
            keys = object_keys(kind, old, new, caches.sources_named, home=False)
        for key in keys:
            self.queue.add(key)

    def _on_namespace(self, old: Namespace | None, new: Namespace | None) -> None:
        for kind, cached in self.cache.kinds.items():
            caches = cached.caches
            for key in namespace_keys(kind, old, new, caches.sources(), caches.source_namespace,
                                      cached.scope):
                self.queue.add(key)

    def _reconcile(self, key: Key) -> Result:
        return self.replicators[key.kind].reconcile(key)

    def _answered(self) -> None:
        self.gate.answered()

    def pending(self) -> int:
        queued, in_flight, delayed = self.queue.counts()
        return queued + in_flight + delayed + self.gate.waiting()


class Fleet:
    """The member clusters: their Secrets watched, each valid one's MemberCluster run, their
    tokens renewed. Started by the leader (members are written to) and stopped with it."""

    def __init__(self, kube: Kube, settings: Settings, home: ClusterInformers,
                 rules: ReplicaRules, recorder: EventRecorder, metrics: Metrics,
                 clock: Clock | None = None, outage: Outage | None = None) -> None:
        self._kube = kube
        self._settings = settings
        self._home = home
        self._rules = rules
        self._recorder = recorder
        self._metrics = metrics
        self._clock = clock or RealClock()
        self.namespace = settings.operator_namespace
        self.secrets: Store[dict[str, Any]] = Store()
        self.informer: Informer[dict[str, Any]] = Informer(
            kube, SECRETS.collection(self.namespace), _kept, self.secrets, self._changed,
            "cluster-secrets", None, self._clock, query={"labelSelector": CLUSTER_LABEL},
            outage=outage)
        self.members: dict[str, MemberCluster] = {}
        self._lock = threading.Lock()  # members, against home_keys from informer threads
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: OwnedThread | None = None
        self._reported: dict[str, tuple[str, str]] = {}   # Secret -> (version, fault)
        self._unreachable: dict[str, str] = {}            # cluster -> why, while it is
        self._renew_after: dict[str, float] = {}          # cluster -> no retry before
        # cluster -> (when this process got its token, by the clock; its lifetime): when to
        # renew a token we asked for is counted on our clock, not read from its claims.
        self._obtained: dict[str, tuple[float, float]] = {}

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.informer.start()
        self._thread = OwnedThread("fleet", self._run)
        self._thread.start()

    def stop(self, timeout: float = MEMBER_STOP) -> bool:
        deadline = Deadline(timeout, self._clock)
        self._stopping.set()
        self._wake.set()
        ended = self._thread is None or self._thread.join(deadline.left())
        with self._lock:
            members = list(self.members.values())
            self.members.clear()
        for member in members:  # each told first: one slow to end holds up none of the others
            member._stopping.set()
        for member in members:
            ended = member.stop(deadline.left()) and ended
        return self.informer.stop(deadline.left()) and ended

    def home_keys(self, keys: set[Key]) -> None:
        """Keys the home cluster's events woke: each source's, to plan in every member."""
        sources = [k for k in keys if k.role == SOURCE]
        if not sources:
            return
        with self._lock:
            members = list(self.members.values())
        for member in members:
            for key in sources:
                member.add(key)

    def pending(self) -> int:
        with self._lock:
            return sum(m.pending() for m in self.members.values())

    # -- the fleet's thread ----------------------------------------------------------------

    def _changed(self, _old: object, _new: object) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self.informer.has_synced():
                self._apply()
                self._check()
            self._wake.wait(CHECK_EVERY)
            self._wake.clear()

    def _apply(self) -> None:
        """Make the running members what the Secrets say."""
        members, faults = inventory(self.secrets.values(), self._settings.cluster_name)
        for secret, fault in faults.items():
            self._invalid(secret, fault)
        for name, member in members.items():
            running = self.members.get(name)
            if running is not None and running.member.kubeconfig == member.kubeconfig \
                    and running.member.labels == member.labels:
                running.member = member  # a new version of the Secret, nothing to change
                continue
            if running is not None:
                log.info("cluster %s: its Secret %s changed; reconnecting", name,
                         member.secret)
                self._remove(name)
            self._add(member)
        for name in set(self.members) - set(members):
            log.info("cluster %s: its Secret is gone; no longer managed (its replicas stay)",
                     name)
            self._remove(name)

    def _add(self, member: Member) -> None:
        try:
            running = MemberCluster(member, self._home, self._settings, self._rules,
                                    self._recorder, self._metrics, self._clock)
        except ConfigError as err:
            self._invalid(member.secret, f"cluster {member.name}: {err}")
            return
        self._reported.pop(member.secret, None)
        running.start()
        with self._lock:
            self.members[member.name] = running
        log.info("cluster %s: connecting (Secret %s/%s)", member.name, self.namespace,
                 member.secret)

    def _remove(self, name: str) -> None:
        with self._lock:
            running = self.members.pop(name, None)
        if running is not None and not running.stop(MEMBER_STOP):
            log.error("cluster %s: its machinery did not stop within %.0f s", name, MEMBER_STOP)
        self._metrics.forget_cluster(name)
        self._unreachable.pop(name, None)
        self._renew_after.pop(name, None)
        self._obtained.pop(name, None)

    def _invalid(self, secret: str, fault: str) -> None:
        """A Warning `InvalidCluster` on the Secret, once per version of it and fault."""
        obj = self.secrets.get(f"{self.namespace}/{secret}") or {}
        meta = obj.get("metadata") or {}
        seen = (str(meta.get("resourceVersion", "")), fault)
        if self._reported.get(secret) == seen:
            return
        self._reported[secret] = seen
        log.warning("Secret %s/%s: %s; that cluster's replicas are left as they are",
                    self.namespace, secret, fault)
        self._recorder.warning(ObjectRef("Secret", self.namespace, secret,
                                         str(meta.get("uid", "")), seen[0]),
                               INVALID_CLUSTER, fault)

    # -- probes and tokens -------------------------------------------------------------------

    def _check(self) -> None:
        with self._lock:
            members = list(self.members.values())
        for member in members:
            if self._stopping.is_set():
                return
            self._probe(member)
            self._renew(member)

    def _probe(self, member: MemberCluster) -> None:
        """Whether the member answers with our credentials: the reachable metric, and a
        Warning on its Secret once when its credentials are refused."""
        why = ""
        try:
            member.kube.request("get", "/api", timeout=PROBE_TIMEOUT)
        except ApiError as err:
            why = f"{err.status} {err.message}" if err.status else err.message
        self._metrics.cluster_reachable.labels(member.name).set(0 if why else 1)
        before = self._unreachable.get(member.name)
        if not why:
            if before is not None:
                log.info("cluster %s: answers again", member.name)
                self._unreachable.pop(member.name)
            return
        if before is None:
            self._unreachable[member.name] = why
            log.warning("cluster %s: unreachable: %s", member.name, why)
            if "401" in why.split(" ", 1)[0] or "403" in why.split(" ", 1)[0]:
                self._warn(member.member, UNREACHABLE,
                           f"cluster {member.name}: its credentials are refused ({why}); its "
                           f"replicas are left as they are until they are renewed (configmirror "
                           f"cluster add {member.name} again)")

    def _renew(self, running: MemberCluster) -> None:
        """Renew the member's token before a third of its lifetime is left, and write it back
        into its Secret."""
        member = running.member
        times = token_times(member.kubeconfig)
        if times is None:
            return  # a credential that is not a token of ours: nothing to renew
        issued, expires = times
        self._metrics.cluster_token_expiry.labels(member.name).set(expires)
        now = self._clock.now()
        obtained, lifetime = self._obtained.get(member.name, (issued, expires - issued))
        if now < renewal_due(obtained, obtained + lifetime) or \
                now < self._renew_after.get(member.name, 0.0):
            return
        lifetime = max(600, round(lifetime))  # TokenRequest's minimum is 10 minutes
        try:
            token, until = request_token(running.kube, MEMBER_NAMESPACE, MEMBER_ACCOUNT,
                                         lifetime)
            text = with_token(member.kubeconfig, token)
            written = self._kube.request(
                "patch", SECRETS.item(self.namespace, member.secret), body={
                    "metadata": {"resourceVersion": member.secret_version},
                    "data": {member.key: base64.b64encode(text.encode()).decode()}},
                content_type="application/merge-patch+json")
        except ApiError as err:
            self._renew_after[member.name] = now + 60.0
            log.warning("cluster %s: cannot renew its token: %s", member.name, err)
            self._warn(member, RENEWAL_FAILED, f"cluster {member.name}: cannot renew its "
                       f"token ({err}); it expires at {_when(expires)}")
            return
        version = str((written.get("metadata") or {}).get("resourceVersion", ""))
        running.use_token(replace(member, kubeconfig=text, secret_version=version), token)
        granted = token_times(text)  # the server may grant less than was asked
        self._obtained[member.name] = (now, granted[1] - granted[0] if granted else lifetime)
        self._metrics.cluster_token_expiry.labels(member.name).set(until)
        log.info("cluster %s: token renewed; it expires at %s", member.name, _when(until))

    def _warn(self, member: Member, reason: str, message: str) -> None:
        self._recorder.warning(ObjectRef("Secret", self.namespace, member.secret,
                                         member.secret_uid, member.secret_version),
                               reason, message)


def _kept(raw: dict[str, Any]) -> dict[str, Any]:
    """A cluster Secret as the inventory reads it: its metadata and data, nothing else."""
    return {"metadata": raw.get("metadata") or {}, "data": raw.get("data") or {}}


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

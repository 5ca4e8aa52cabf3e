"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's timings and semantics.

Why not `kubernetes.leaderelection`: in the client we depend on it calls `sys.exit()` on a
config it dislikes, cannot be stopped from outside (its loop runs until the process ends) and
does not release the lease on shutdown, so a standby would wait a whole lease duration. This
elector is small, runs on a thread its owner starts and joins, and releases the lease on
stop so a standby takes over at once.

Expiry is judged by local observation, as client-go does: a lease whose record has not changed
for `lease_duration` seconds of our own clock is expired, whatever the holder's clock says.
A leader that cannot renew steps down `renew_deadline` seconds after its last renewal, not
later: like client-go's renew context, each attempt's requests get only the time left before
that deadline, so a silent connection or a handshake that never ends cannot keep it leading
into the time a standby may take over (`lease_duration` after it last saw a renewal).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from configmirror.client.kube import ApiError, Kube
from configmirror.client.outage import Outage, no_answer, served
from configmirror.clock import Clock, RealClock
from configmirror.lifecycle import Deadline, OwnedThread

log = logging.getLogger(__name__)
REQUEST_TIMEOUT = 5.0       # one lease request
MIN_REQUEST_TIMEOUT = 0.5   # the least a leader's last attempt before its deadline gets


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires and renews one Lease; calls back when leadership starts and when it is lost."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str,
                 on_started_leading: Callable[[], None],
                 on_stopped_leading: Callable[[], None],
                 lease_duration: float = 15.0, renew_deadline: float = 10.0,
                 retry_period: float = 2.0, clock: Clock | None = None,
                 outage: Outage | None = None) -> None:
        """`outage`: the operator's one view of whether the API server answers: an attempt
        that got no answer waits for the retry period or until the outage ends."""
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("leader election needs lease_duration > renew_deadline > "
                             f"retry_period > 0, got {lease_duration}, {renew_deadline}, "
                             f"{retry_period}")
        self.identity = identity
        self._kube = kube
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._name = name
        self._namespace = namespace
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._clock = clock or RealClock()
        self._outage = outage
        self._unanswered = False  # the last attempt got no answer at all
        self._stopped = threading.Event()
        # Set by stop() before _stopped: the release must be done by it.
        self._stop_by: Deadline | None = None
        self._leading = threading.Event()
        self._thread: OwnedThread | None = None
        # The last lease record seen, and when (our clock) it last changed.
        self._observed: tuple[str, str] | None = None  # (holder, renewTime)
        self._observed_at = 0.0
        self._resource_version = ""
        self._transitions = 0
        self._last_renew = 0.0
        self._last_error: str | None = None

    def start(self) -> None:
        """Start trying to acquire the lease, and renewing it once held, on its own thread."""
        self._thread = OwnedThread("leader-election", self._run)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop trying; if leading, release the lease so a standby takes over at once. All
        within `timeout` seconds (the release's requests get only what is left); True once
        the thread has ended."""
        self._stop_by = Deadline(timeout)
        self._stopped.set()
        if self._outage is not None:
            self._outage.interrupt()
        return self._thread is None or self._thread.join(timeout)

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def wait_until_leading(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped.is_set():
            started = self._clock.now()
            ok = self._try_acquire_or_renew(self._attempt_timeout(started))
            now = self._clock.now()
            if ok:
                self._last_renew = started  # the lease says when we started to renew it
                if not self._leading.is_set():
                    log.info("became leader (lease %s/%s, identity %s)", self._namespace,
                             self._name, self.identity)
                    self._leading.set()
                    self._on_started()
            # client-go's JitterUntil: retry_period up to 1.2x; a leader wakes in time to
            # step down at its deadline.
            wait = self._retry_period * (1 + 0.2 * random.random())
            if self._leading.is_set():
                left = self._last_renew + self._renew_deadline - now
                if not ok and left <= 0:
                    log.error("lost leadership: lease not renewed within %.0f s",
                              self._renew_deadline)
                    self._leading.clear()
                    self._on_stopped()
                    return
                wait = min(wait, max(left, 0.0)) if not ok else wait
            self._wait(wait)
        if self._leading.is_set():
            self._release()
            self._leading.clear()

    def _wait(self, seconds: float) -> None:
        """Wait until the next attempt; after one that got no answer, no longer than the
        outage it met."""
        outage = self._outage
        if outage is None or not self._unanswered:
            self._stopped.wait(seconds)
            return
        outage.wait(outage.failed(), seconds, self._stopped.is_set)

    def _attempt_timeout(self, now: float) -> float:
        """A request's timeout: REQUEST_TIMEOUT, and for a leader no more than the time left
        before it must step down."""
        if not self._leading.is_set():
            return REQUEST_TIMEOUT
        left = self._last_renew + self._renew_deadline - now
        return min(REQUEST_TIMEOUT, max(left / 2, MIN_REQUEST_TIMEOUT))

    def _try_acquire_or_renew(self, timeout: float) -> bool:
        """One get and one write of the lease, each within `timeout`."""
        self._unanswered = False
        try:
            lease = self._kube.request("get", f"{self._path}/{self._name}", timeout=timeout)
        except ApiError as err:
            if err.status != 404:
                return self._failed(err)
            return self._create(timeout)
        if self._outage is not None:
            self._outage.answered()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime", "")))
        now = self._clock.now()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self._resource_version = lease["metadata"]["resourceVersion"]
        self._transitions = int(spec.get("leaseTransitions") or 0)
        duration = float(spec.get("leaseDurationSeconds") or self._lease_duration)
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False  # someone else holds a live lease
        return self._update(acquiring=holder != self.identity, spec=spec, timeout=timeout)

    def _create(self, timeout: float) -> bool:
        now = _now_micro()
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": {"holderIdentity": self.identity,
                         "leaseDurationSeconds": int(self._lease_duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        try:
            self._kube.request("create", self._path, body=body, timeout=timeout)
        except ApiError as err:
            return self._failed(err)
        return True

    def _update(self, acquiring: bool, spec: dict[str, Any], timeout: float) -> bool:
        now = _now_micro()
        new_spec = {**spec, "holderIdentity": self.identity,
                    "leaseDurationSeconds": int(self._lease_duration), "renewTime": now}
        if acquiring:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = self._transitions + 1
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace,
                             "resourceVersion": self._resource_version},
                "spec": new_spec}
        try:
            self._kube.request("update", f"{self._path}/{self._name}", body=body,
                               timeout=timeout)
        except ApiError as err:
            return self._failed(err)
        self._last_error = None
        return True

    def _release(self) -> None:
        """Hand the lease back: empty holder, 1 s duration (what client-go's release writes),
        within what is left of stop()'s timeout."""
        try:
            lease = self._kube.request("get", f"{self._path}/{self._name}",
                                       timeout=self._release_timeout())
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = _now_micro()
            lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1,
                             "renewTime": now, "acquireTime": now}
            self._kube.request("update", f"{self._path}/{self._name}", body=lease,
                               timeout=self._release_timeout())
            log.info("released the lease %s/%s", self._namespace, self._name)
        except (ApiError, TimeoutError) as err:
            log.warning("could not release the lease %s/%s: %s", self._namespace, self._name,
                        err)

    def _release_timeout(self) -> float:
        """A release request's timeout: REQUEST_TIMEOUT, or less, what is left of stop()'s;
        TimeoutError once too little is left for a request."""
        left = REQUEST_TIMEOUT if self._stop_by is None else self._stop_by.left()
        if left < MIN_REQUEST_TIMEOUT:
            raise TimeoutError("no time left to release it before the shutdown's deadline")
        return min(REQUEST_TIMEOUT, left)

    def _failed(self, err: ApiError) -> bool:
        self._unanswered = no_answer(err)
        if served(err) and self._outage is not None:
            self._outage.answered()  # a conflict, say: the server serves
        message = str(err)
        if err.status != 409 and message != self._last_error:  # 409: lost a race, normal
            log.warning("leader election: %s", message)
            self._last_error = message
        return False

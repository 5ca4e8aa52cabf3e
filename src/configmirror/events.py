"""Kubernetes Events on the objects we act for, aggregated so nothing floods the Events API.

One Event per distinct (object, type, reason, message); a repeat patches its count and
lastTimestamp (client-go's EventCorrelator does the same). Recording never fails the caller:
a lost Event is logged, and the reconcile goes on.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from configmirror.kube import ApiError, Kube

log = logging.getLogger(__name__)
MAX_MESSAGE = 1024


class Referable(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    kind: str = "ConfigMap"
    api_version: str = "v1"

    @classmethod
    def of(cls, obj: Referable) -> ObjectRef:
        return cls(obj.namespace, obj.name, obj.uid, obj.resource_version)


@dataclass
class _Recorded:
    name: str
    count: int


class EventRecorder:
    """Writes core/v1 Events, one per distinct message per object, counted."""

    def __init__(self, kube: Kube, component: str = "configmirror",
                 instance: str | None = None, max_remembered: int = 4096) -> None:
        self._kube = kube
        self._component = component
        self._instance = instance or socket.gethostname()
        self._max = max_remembered
        self._recorded: OrderedDict[tuple[str, str, str, str], _Recorded] = OrderedDict()
        self._lock = threading.Lock()
        self._failing = False

    def normal(self, ref: ObjectRef, reason: str, message: str) -> None:
        self._record(ref, "Normal", reason, message)

    def warning(self, ref: ObjectRef, reason: str, message: str) -> None:
        self._record(ref, "Warning", reason, message)

    def _record(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        message = message[:MAX_MESSAGE]
        key = (ref.uid, type_, reason, message)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            seen = self._recorded.get(key)
            if seen is not None:
                seen.count += 1
                self._recorded.move_to_end(key)
                count, name = seen.count, seen.name
            else:
                count, name = 1, f"{ref.name}.{secrets.token_hex(8)}"
                self._recorded[key] = _Recorded(name, 1)
                while len(self._recorded) > self._max:
                    self._recorded.popitem(last=False)
        path = f"/api/v1/namespaces/{ref.namespace}/events"
        try:
            if count > 1:
                try:
                    self._kube.request("patch", f"{path}/{name}",
                                       body={"count": count, "lastTimestamp": now},
                                       content_type="application/merge-patch+json")
                    self._ok()
                    return
                except ApiError as err:
                    if err.status != 404:  # the Event expired (TTL): write a new one
                        raise
            self._kube.request("create", path, body=self._event(ref, name, type_, reason,
                                                                message, count, now))
            self._ok()
        except ApiError as err:
            if not self._failing:
                log.warning("cannot record Event %s on %s/%s: %s (further failures are "
                            "logged at debug level)", reason, ref.namespace, ref.name, err)
                self._failing = True
            else:
                log.debug("cannot record Event %s on %s/%s: %s", reason, ref.namespace,
                          ref.name, err)

    def _ok(self) -> None:
        self._failing = False

    def _event(self, ref: ObjectRef, name: str, type_: str, reason: str, message: str,
               count: int, now: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace},
            "involvedObject": {"kind": ref.kind, "apiVersion": ref.api_version,
                               "namespace": ref.namespace, "name": ref.name, "uid": ref.uid,
                               "resourceVersion": ref.resource_version},
            "type": type_, "reason": reason, "message": message, "count": count,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": self._component, "reportingInstance": self._instance,
        }

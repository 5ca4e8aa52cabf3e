"""Talking to the API server: client configuration, raw JSON requests, watch streams.

The official client loads kubeconfig/in-cluster credentials and owns the TLS connection pool;
requests go through that pool with raw JSON bodies (no model objects, which cost about 9x a
json.loads on large lists). Every request has a timeout, is counted by verb and code, and
passes one client-side rate limit shared by the whole process (kube-controller-manager's
--kube-api-qps/--kube-api-burst). A 429 or 5xx that carries Retry-After (API Priority and
Fairness) is retried after that long, as client-go does. What a failure means is decided here,
once (`ApiError.failure`); what to do about it is the caller's policy.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from configmirror.ratelimit import TokenBucketRateLimiter

CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 30.0
RETRY_AFTER_ATTEMPTS = 3     # client-go retries up to 10; a worker should not sit on one call
RETRY_AFTER_MAX = 10.0       # seconds: a longer Retry-After is the caller's to wait, not ours


@dataclass(frozen=True)
class Resource:
    """A namespaced core/v1 resource and its REST paths."""

    plural: str
    kind: str

    def collection(self, namespace: str | None = None) -> str:
        """All objects (cluster-wide) or one namespace's."""
        if namespace is None:
            return f"/api/v1/{self.plural}"
        return f"/api/v1/namespaces/{namespace}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/{self.plural}/{name}"


CONFIGMAPS = Resource("configmaps", "ConfigMap")
SECRETS = Resource("secrets", "Secret")
EVENTS = Resource("events", "Event")
NAMESPACES = "/api/v1/namespaces"


class Failure(Enum):
    """What a failed request says, whoever made it."""

    UNAVAILABLE = "unavailable"  # no answer, 429, 5xx: the server's state, not the object's
    CONFLICT = "conflict"        # 409: our view was stale; a retry sees the new state
    NOT_FOUND = "not found"      # 404: the object (or its namespace) is gone
    REJECTED = "rejected"        # any other 4xx: forbidden, invalid, too large: the object's
                                 # or the permission's fault, no retry fixes it


class ConfigError(Exception):
    """No usable cluster configuration (message says which file/context and why)."""


class ApiError(Exception):
    """A request failed: an HTTP status from the apiserver, or status 0 for no answer at all."""

    def __init__(self, status: int, reason: str, message: str, verb: str, path: str,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{verb} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after  # seconds the server asked us to wait, if it did

    @property
    def failure(self) -> Failure:
        return classify(self.status)

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def namespace_terminating(self) -> bool:
        return self.status == 403 and "being terminated" in self.message


def load_configuration(kubeconfig: str | None = None, context: str | None = None,
                       pool_size: int = 16) -> k8s_client.Configuration:
    """In a pod (and no kubeconfig given): the in-cluster config; elsewhere the kubeconfig."""
    configuration = k8s_client.Configuration()
    try:
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration)
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context,
                                        client_configuration=configuration,
                                        persist_config=False)
    except (k8s_config.ConfigException, OSError, TypeError, ValueError) as err:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ConfigError(f"cannot load cluster configuration from {where}"
                          f"{f' (context {context})' if context else ''}: {err}") from None
    configuration.connection_pool_maxsize = pool_size
    return configuration


def classify(status: int) -> Failure:
    """The one place that decides what an HTTP status (0: no answer) means."""
    if status in {0, 429} or status >= 500:
        return Failure.UNAVAILABLE
    if status == 409:
        return Failure.CONFLICT
    if status == 404:
        return Failure.NOT_FOUND
    return Failure.REJECTED


class Kube:
    """Raw JSON access to one API server, with timeouts, a rate limit and request counters.

    `qps` <= 0 turns the client-side limit off (the server's own limits still apply).
    """

    def __init__(self, configuration: k8s_client.Configuration,
                 user_agent: str = "configmirror", qps: float = 0.0, burst: int = 1) -> None:
        self.configuration = configuration
        self._api_client = k8s_client.ApiClient(configuration)
        self._pool: urllib3.PoolManager = self._api_client.rest_client.pool_manager
        self._host = configuration.host.rstrip("/")
        self._user_agent = user_agent
        self._limiter = TokenBucketRateLimiter(qps, max(burst, 1)) if qps > 0 else None
        self._closing = threading.Event()  # wakes requests waiting on the limit or Retry-After
        self._counts: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()

    def close(self) -> None:
        self._closing.set()
        self._api_client.close()  # type: ignore[no-untyped-call]

    # -- requests -----------------------------------------------------------------------------

    def request(self, verb: str, path: str, query: dict[str, Any] | None = None,
                body: Any = None, timeout: float = REQUEST_TIMEOUT,
                content_type: str = "application/json") -> dict[str, Any]:
        """One request; returns the decoded JSON body or raises ApiError.

        The body of a failed request is never part of the error: only the server's reason and
        message (which the server writes; it does not echo Secret values).
        """
        method = _METHODS[verb]
        url = self._url(path, query)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in range(1, RETRY_AFTER_ATTEMPTS + 1):
            self._wait_for_turn()
            try:
                resp = self._pool.request(
                    method, url, body=data,
                    headers=self._headers(content_type if data is not None else None),
                    timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=timeout),
                    retries=False, preload_content=True)
            except urllib3.exceptions.HTTPError as err:
                self._count(verb, path, 0)
                raise ApiError(0, "ConnectionError", str(err), verb, path) from None
            self._count(verb, path, resp.status)
            if resp.status < 400:
                return _decode(resp.data)
            decoded = _decode(resp.data)
            error = ApiError(resp.status, str(decoded.get("reason", resp.reason)),
                             str(decoded.get("message", "")), verb, path,
                             _retry_after(resp.headers.get("Retry-After")))
            # The server said when to come back (APF's 429, an overloaded 5xx): the request
            # was not processed, so any verb may be sent again.
            if (error.retry_after is None or error.failure is not Failure.UNAVAILABLE
                    or attempt == RETRY_AFTER_ATTEMPTS or error.retry_after > RETRY_AFTER_MAX):
                raise error
            if self._closing.wait(error.retry_after):
                raise error
        raise AssertionError("unreachable")  # the loop returns or raises

    def watch(self, path: str, query: dict[str, Any], read_timeout: float) -> WatchStream:
        """Open a watch stream; the caller iterates its events and closes it."""
        url = self._url(path, {**query, "watch": "true"})
        self._wait_for_turn()
        try:
            resp = self._pool.request(
                "GET", url, headers=self._headers(None),
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=read_timeout),
                retries=False, preload_content=False)
        except urllib3.exceptions.HTTPError as err:
            self._count("watch", path, 0)
            raise ApiError(0, "ConnectionError", str(err), "watch", path) from None
        self._count("watch", path, resp.status)
        if resp.status >= 400:
            decoded = _decode(resp.read())
            resp.release_conn()
            raise ApiError(resp.status, str(decoded.get("reason", resp.reason)),
                           str(decoded.get("message", "")), "watch", path,
                           _retry_after(resp.headers.get("Retry-After")))
        return WatchStream(resp)

    # -- counters -----------------------------------------------------------------------------

    def counts(self) -> dict[tuple[str, str, int], int]:
        """Requests so far by (verb, resource, status); status 0 means no answer."""
        with self._lock:
            return dict(self._counts)

    def total(self, verbs: frozenset[str] | set[str], resource: str | None = None) -> int:
        """How many requests with one of `verbs` (optionally to `resource`) were sent."""
        with self._lock:
            return sum(n for (verb, res, _), n in self._counts.items()
                       if verb in verbs and (resource is None or res == resource))

    # -- internals ----------------------------------------------------------------------------

    def _wait_for_turn(self) -> None:
        """Block until the client-side rate limit lets one more request through."""
        if self._limiter is not None:
            delay = self._limiter.when(None)
            if delay > 0:
                self._closing.wait(delay)

    def _url(self, path: str, query: dict[str, Any] | None) -> str:
        if not query:
            return self._host + path
        return f"{self._host}{path}?{urlencode({k: v for k, v in query.items() if v is not None})}"

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        if content_type is not None:
            headers["Content-Type"] = content_type
        for auth in self.configuration.auth_settings().values():  # refreshes expiring tokens
            setting = cast(dict[str, str], auth)
            if setting["in"] == "header" and setting["value"]:
                headers[setting["key"]] = setting["value"]
        return headers

    def _count(self, verb: str, path: str, status: int) -> None:
        with self._lock:
            self._counts[(verb, resource_of(path), status)] += 1


class WatchStream:
    """The events of one watch response, one decoded JSON object per line."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        for chunk in self._response.stream(64 * 1024, decode_content=True):
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                line, buffer = buffer[:end], buffer[end + 1:]
                if line.strip():
                    yield json.loads(line)
        if buffer.strip():
            yield json.loads(buffer)

    def close(self) -> None:
        """End the stream; safe from another thread, where it also unblocks a pending read."""
        # Raised when the stream already ended: its connection went back to the pool
        # (RuntimeError) or its socket is already gone (ValueError). Nothing left to stop.
        with contextlib.suppress(RuntimeError, ValueError):
            self._response.shutdown()
        self._response.close()
        self._response.release_conn()


_METHODS = {"get": "GET", "list": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
            "delete": "DELETE"}


def resource_of(path: str) -> str:
    """The resource a path names: /api/v1/namespaces/a/configmaps/b -> configmaps."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[-2] == "namespaces" and len(parts) % 2 == 0:
        return "namespaces"
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _RESOURCES:
            return parts[i]
    return parts[-1] if parts else ""


_RESOURCES = frozenset({"configmaps", "namespaces", "events", "leases", "secrets",
                        "serviceaccounts"})


def _retry_after(header: str | None) -> float | None:
    """Retry-After in seconds (the API server sends whole seconds; dates are not used)."""
    if header is None:
        return None
    try:
        return max(float(header), 0.0)
    except ValueError:
        return None


def _decode(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    try:
        decoded = json.loads(data)
    except ValueError:
        return {"message": data[:200].decode(errors="replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}

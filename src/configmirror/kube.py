"""Talking to the API server: client configuration, raw JSON requests, watch streams.

The official client loads kubeconfig/in-cluster credentials and owns the TLS connection pool;
requests go through that pool with raw JSON bodies (no model objects, which cost about 9x a
json.loads on large lists). Every request has a timeout and is counted by verb and code.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 30.0


class ConfigError(Exception):
    """No usable cluster configuration (message says which file/context and why)."""


class ApiError(Exception):
    """A request failed: an HTTP status from the apiserver, or status 0 for no answer at all."""

    def __init__(self, status: int, reason: str, message: str, verb: str, path: str) -> None:
        super().__init__(f"{verb} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        """Conflicts, throttling, server errors and lost connections are worth retrying."""
        return self.status in (0, 409, 429) or self.status >= 500

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


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]


class Kube:
    """Raw JSON access to one API server, with timeouts and request counters."""

    def __init__(self, configuration: k8s_client.Configuration,
                 user_agent: str = "configmirror") -> None:
        self.configuration = configuration
        self._api_client = k8s_client.ApiClient(configuration)
        self._pool: urllib3.PoolManager = self._api_client.rest_client.pool_manager
        self._host = configuration.host.rstrip("/")
        self._user_agent = user_agent
        self._counts: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]

    # -- requests -----------------------------------------------------------------------------

    def request(self, verb: str, path: str, query: dict[str, Any] | None = None,
                body: Any = None, timeout: float = REQUEST_TIMEOUT,
                content_type: str = "application/json") -> dict[str, Any]:
        """One request; returns the decoded JSON body or raises ApiError."""
        method = _METHODS[verb]
        url = self._url(path, query)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
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
        decoded = _decode(resp.data)
        if resp.status >= 400:
            raise ApiError(resp.status, str(decoded.get("reason", resp.reason)),
                           str(decoded.get("message", resp.data[:200])), verb, path)
        return decoded

    def watch(self, path: str, query: dict[str, Any], read_timeout: float) -> WatchStream:
        """Open a watch stream; the caller iterates its events and closes it."""
        url = self._url(path, {**query, "watch": "true"})
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
                           str(decoded.get("message", "")), "watch", path)
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


def _decode(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    try:
        decoded = json.loads(data)
    except ValueError:
        return {"message": data[:200].decode(errors="replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}

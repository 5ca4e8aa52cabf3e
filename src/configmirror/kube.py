"""Talking to the API server: client configuration, raw JSON requests, watch streams.

The official client loads kubeconfig/in-cluster credentials and decides the TLS settings and
the proxy. Requests carry raw JSON bodies (no model objects, which cost about 9x a json.loads
on large lists). On a direct connection (no proxy) they go over keep-alive HTTP/1.1
connections of our own, with the TLS settings of the official client's pool: each request
written in one send, each answer read by a small reader of HTTP/1.1's framing. CPU per write
is what limits a fan-out on a small machine, and this costs a third of going through
urllib3's layers (measured single-threaded: 2.0 ms -> 0.6 ms of CPU per create). Watches,
and everything through a proxy, use the official client's urllib3 pool. Every request has
a timeout, is counted by verb and code, and passes one client-side rate limit shared by the
whole process (kube-controller-manager's --kube-api-qps/--kube-api-burst). A 429 or 5xx that
carries Retry-After (API Priority and Fairness) is retried after that long, as client-go
does. What a failure means is decided here, once (`ApiError.failure`); what to do about it
is the caller's policy.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, BinaryIO, NamedTuple, cast
from urllib.parse import urlencode, urlsplit

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from configmirror.clock import Clock, RealClock
from configmirror.ratelimit import TokenBucketRateLimiter

CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 30.0
RETRY_AFTER_ATTEMPTS = 3     # client-go retries up to 10; a worker should not sit on one call
RETRY_AFTER_MAX = 10.0       # seconds: a longer Retry-After is the caller's to wait, not ours
# Seconds a credential header is reused before the client's loader is asked again. Asking it
# runs its refresh hook, which re-reads the proxy settings of the whole environment: about a
# millisecond, a third of the CPU a replica write cost. The loaders renew a token minutes
# before it expires (in-cluster: the file is re-read every minute), so a second is safe.
AUTH_REFRESH = 1.0


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
        self.verb = verb
        self.path = path
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
                 user_agent: str = "configmirror", qps: float = 0.0, burst: int = 1,
                 clock: Clock | None = None) -> None:
        self.configuration = configuration
        self._api_client = k8s_client.ApiClient(configuration)
        self._pool: urllib3.PoolManager = self._api_client.rest_client.pool_manager
        self._host = configuration.host.rstrip("/")
        self._connections: _Connections | None = None
        if type(self._pool) is urllib3.PoolManager:  # a proxy keeps the official client's way
            self._connections = _Connections(self._host, self._pool.connection_pool_kw)
        self._user_agent = user_agent
        self._limiter = TokenBucketRateLimiter(qps, max(burst, 1)) if qps > 0 else None
        self._closing = threading.Event()  # wakes requests waiting on the limit or Retry-After
        self._counts: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()
        self._clock: Clock = clock or RealClock()
        # (when it was read, the credential headers): replaced whole, so no lock is needed.
        self._auth: tuple[float, dict[str, str]] | None = None

    def close(self) -> None:
        self._closing.set()
        if self._connections is not None:
            self._connections.close()
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
        target = _target(path, query)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        send = self._connections.request if self._connections is not None else self._urllib3
        for attempt in range(1, RETRY_AFTER_ATTEMPTS + 1):
            self._wait_for_turn()
            try:
                resp = send(method, target, data,
                            self._headers(content_type if data is not None else None), timeout)
            except (OSError, http.client.HTTPException, urllib3.exceptions.HTTPError) as err:
                self._count(verb, path, 0)
                raise ApiError(0, "ConnectionError", str(err) or type(err).__name__, verb,
                               path) from None
            self._count(verb, path, resp.status)
            if resp.status < 400:
                return _decode(resp.data)
            decoded = _decode(resp.data)
            error = ApiError(resp.status, str(decoded.get("reason", resp.reason)),
                             str(decoded.get("message", "")), verb, path,
                             _retry_after(resp.retry_after))
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
        url = self._host + _target(path, {**query, "watch": "true"})
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

    def _urllib3(self, method: str, target: str, data: bytes | None, headers: dict[str, str],
                 timeout: float) -> _Response:
        """One request through the official client's pool (used through a proxy)."""
        resp = self._pool.request(
            method, self._host + target, body=data, headers=headers,
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=timeout),
            retries=False, preload_content=True)
        return _Response(resp.status, resp.reason or "", resp.data,
                         resp.headers.get("Retry-After"))

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent,
                   **self._credentials()}
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    def _credentials(self) -> dict[str, str]:
        """The credential headers, read from the client's configuration at most once per
        AUTH_REFRESH seconds (reading them refreshes an expiring token)."""
        now = self._clock.now()
        cached = self._auth
        if cached is not None and now - cached[0] < AUTH_REFRESH:
            return cached[1]
        headers = {}
        for auth in self.configuration.auth_settings().values():
            setting = cast(dict[str, str], auth)
            if setting["in"] == "header" and setting["value"]:
                headers[setting["key"]] = setting["value"]
        self._auth = (now, headers)
        return headers

    def _count(self, verb: str, path: str, status: int) -> None:
        with self._lock:
            self._counts[(verb, resource_of(path), status)] += 1


class _Response(NamedTuple):
    status: int
    reason: str
    data: bytes
    retry_after: str | None  # the Retry-After header, if any


class _Connections:
    """Keep-alive HTTP/1.1 connections to one API server, each used by one request at a time.

    A request is written in one piece (its head and body in one send); its answer is read by
    `_read_response` (http.client's reader parses headers with the email package, which cost
    a third of a request's CPU). The TLS settings are the official client's (the keyword
    arguments of its urllib3 pool). As in urllib3, an idle connection the server has closed
    is dropped before reuse, a connection that failed is never reused, and at most `maxsize`
    idle ones are kept.
    """

    def __init__(self, host: str, pool_kw: dict[str, Any]) -> None:
        url = urlsplit(host)
        https = url.scheme == "https"
        self._address = (url.hostname or "localhost", url.port or (443 if https else 80))
        self._host_header = url.netloc.rpartition("@")[2]
        self._context = _ssl_context(pool_kw) if https else None
        self._server_hostname = pool_kw.get("server_hostname") or self._address[0]
        self._socket_options = pool_kw.get("socket_options") or \
            [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        self._maxsize = int(pool_kw.get("maxsize") or 1)
        self._idle: list[_Connection] = []  # most recently used last (LIFO: warm sockets)
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, target: str, data: bytes | None, headers: dict[str, str],
                timeout: float) -> _Response:
        conn = self._take()
        try:
            if conn.read_timeout != timeout:
                conn.sock.settimeout(timeout)
                conn.read_timeout = timeout
            conn.sock.sendall(self._head(method, target, headers, data) + (data or b""))
            resp, keep_alive = _read_response(conn.rfile, method)
        except BaseException:
            conn.close()
            raise
        if keep_alive:
            self._give_back(conn)
        else:
            conn.close()
        return resp

    def close(self) -> None:
        with self._lock:
            self._closed, idle, self._idle = True, self._idle, []
        for conn in idle:
            conn.close()

    def _head(self, method: str, target: str, headers: dict[str, str],
              data: bytes | None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if data is not None:
            lines.append(f"Content-Length: {len(data)}")
        if any("\n" in line or "\r" in line for line in lines):  # no header smuggled in
            raise ValueError(f"{method} {target}: a line break in the request head")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _take(self) -> _Connection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect()
            if not conn.dropped():
                return conn
            conn.close()

    def _connect(self) -> _Connection:
        sock = socket.create_connection(self._address, CONNECT_TIMEOUT)
        try:
            for option in self._socket_options:
                sock.setsockopt(*option)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._server_hostname)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock, CONNECT_TIMEOUT)

    def _give_back(self, conn: _Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._maxsize:
                self._idle.append(conn)
                return
        conn.close()


class _Connection:
    """One connected socket (plain, or TLS verified against the server name the official
    client chose, which may differ from the address connected to: tls-server-name), and the
    buffered reader its answers are read through."""

    def __init__(self, sock: socket.socket, read_timeout: float) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.read_timeout = read_timeout  # the timeout now set on the socket

    def dropped(self) -> bool:
        """True when the idle connection is unusable: the server closed it (or sent
        something unasked), which makes the socket readable."""
        try:
            if hasattr(select, "poll"):  # no FD_SETSIZE limit (select() has one)
                poller = select.poll()
                poller.register(self.sock, select.POLLIN)
                return bool(poller.poll(0))
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


# Limits on an answer's head, as http.client has them.
_MAX_LINE = 65536
_MAX_HEADERS = 100


def _read_response(rfile: BinaryIO, method: str) -> tuple[_Response, bool]:
    """Read one HTTP/1.x answer: (the response, whether the connection may be reused).

    The answer to a request of ours, so only what RFC 9112 asks of a client reading it:
    interim 1xx answers skipped, the body framed by chunked transfer coding, else by
    Content-Length, else by the end of the connection. Only the headers the caller uses
    are kept, by lower-case name. A malformed answer raises http.client's exceptions.
    """
    while True:
        line = rfile.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected("the server closed the connection without "
                                                 "an answer")
        version, _, rest = line.partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise http.client.BadStatusLine(repr(line[:100]))
        status = int(code)
        headers = _read_headers(rfile)
        if status >= 200:
            break
    keep_alive = version == b"HTTP/1.1" and \
        "close" not in headers.get("connection", "").lower()
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = _read_chunked(rfile)
    elif "content-length" in headers:
        body = _read_exactly(rfile, _number(headers["content-length"], 10))
    else:
        body, keep_alive = rfile.read(), False
    return _Response(status, reason.strip().decode("latin-1"), body,
                     headers.get("retry-after")), keep_alive


# The only headers an answer is read for; the apiserver sends about ten per answer.
_WANTED = {name.encode(): name for name in
           ("connection", "transfer-encoding", "content-length", "retry-after")}


def _read_headers(rfile: BinaryIO) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADERS + 1):
        line = rfile.readline(_MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return headers
        if not line:
            raise http.client.IncompleteRead(b"")  # the connection ended inside the head
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        name, colon, value = line.partition(b":")
        wanted = _WANTED.get(name.strip().lower()) if colon else None
        if wanted is not None:
            headers[wanted] = value.strip().decode("latin-1")
    raise http.client.HTTPException(f"more than {_MAX_HEADERS} headers")


def _read_chunked(rfile: BinaryIO) -> bytes:
    chunks = []
    while size := _number(rfile.readline(_MAX_LINE + 1).split(b";", 1)[0], 16):
        chunks.append(_read_exactly(rfile, size))
        if _read_exactly(rfile, 2) != b"\r\n":
            raise http.client.HTTPException("a chunk not followed by CRLF")
    _read_headers(rfile)  # the trailer, up to its blank line
    return b"".join(chunks)


def _read_exactly(rfile: BinaryIO, size: int) -> bytes:
    data = rfile.read(size)
    if len(data) < size:
        raise http.client.IncompleteRead(data, size - len(data))
    return data


def _number(text: str | bytes, base: int) -> int:
    try:
        value = int(text.strip(), base)
    except ValueError:
        raise http.client.HTTPException(f"not a number: {text[:40]!r}") from None
    if value < 0:
        raise http.client.HTTPException(f"a negative length: {value}")
    return value


def _ssl_context(pool_kw: dict[str, Any]) -> ssl.SSLContext:
    """The TLS settings the official client gave its urllib3 pool, as an SSLContext."""
    cadata = pool_kw.get("ca_cert_data")
    if isinstance(cadata, bytes):
        cadata = cadata.decode()
    context = ssl.create_default_context(cafile=pool_kw.get("ca_certs"), cadata=cadata)
    if pool_kw.get("cert_file"):
        context.load_cert_chain(pool_kw["cert_file"], pool_kw.get("key_file"))
    if pool_kw.get("cert_reqs") == ssl.CERT_NONE:  # verify_ssl: false in the kubeconfig
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif pool_kw.get("assert_hostname") is False:
        context.check_hostname = False
    return context


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


def _target(path: str, query: dict[str, Any] | None) -> str:
    """The request target: the path and its query (None values left out)."""
    if not query:
        return path
    return f"{path}?{urlencode({k: v for k, v in query.items() if v is not None})}"


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

"""The wire to one API server: keep-alive HTTP/1.1 over TCP or TLS, and long-lived streams.

Why not urllib3, the official client's transport: CPU per write is what limits a fan-out on a
small machine, and going through urllib3's layers cost three times as much (measured
single-threaded: 2.0 ms -> 0.6 ms of CPU per create). Here a request is written in one send
(its head and body together) and its answer parsed from what one recv brought in.

Why not h11 (the well-kept sans-IO HTTP/1.1 library) for the framing: measured, it costs
more than the 10% per write it was allowed. `bench_convergence.py --sources 1 --namespaces
5000`, two runs each, alternated, on a shared 2-core machine (so noisy): the operator's CPU
per 1,000 writes 0.86 and 0.97 s with h11 framing and parsing each request, 0.76 and 0.60 s
with this reader (0.51 and 0.70 s before the move); the Python bare client, which is this
transport and nothing else, 0.59 and 0.61 s with h11, 0.37 and 0.33 s with this one. Alone,
one create and its 2 KB answer over a socket pair (a throwaway micro-benchmark): 181 us of
CPU with h11, 38 us here. h11 validates every header with regular expressions and builds an
event per part; the answer to a write needs four headers and one split.

What it honours of the official client's `Configuration`, and nothing it cannot: the server
URL; the CA (`ssl_ca_cert`, a file; `ca_cert_data`), the client certificate and key
(`cert_file`, `key_file`), `verify_ssl`, `tls_server_name` and `assert_hostname`; the proxy
(`proxy`: the kubeconfig's proxy-url or, as the official client resolves them, HTTPS_PROXY and
the like, with NO_PROXY), over an HTTP CONNECT tunnel (plain http:// proxies only);
`socket_options`. Anything else is refused when the endpoint is built (`UnsupportedSetting`
names the setting), never silently ignored: a CA that is a directory, a key that needs a
password (a kubeconfig cannot carry one, and OpenSSL would ask for it on the terminal), a
socks or https:// proxy.

Every socket gets TCP keepalive with client-go's timings (the official client's helper), so
the kernel notices a path that black-holes packets. A connection is used by one request at a
time; as in urllib3, an idle one the server closed is dropped before reuse, and one that
failed is never reused. A request that gets no byte within its timeout also drops every idle
connection: whatever silenced one open flow (a NAT or load balancer that forgot it, a stuck
proxy) usually silenced all that were open with it, and a fresh one costs a handshake.
A stream (a watch) has a connection of its own, read with a timeout per read, and can be
closed from another thread.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from kubernetes.client.rest import should_bypass_proxies
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

CONNECT_TIMEOUT = 10.0  # TCP connect, the proxy's CONNECT and the TLS handshake, each (at
                        # most the request's own timeout)
_RECV = 65536           # bytes asked of one recv: a whole answer to a write in one call

# Limits on an answer's head, as http.client has them.
MAX_LINE = 65536
MAX_HEADERS = 100


class UnsupportedSetting(Exception):
    """A client setting this transport cannot honour; `setting` is the Configuration
    attribute that holds it (the caller names it as its user wrote it)."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


class Response(NamedTuple):
    status: int
    reason: str
    data: bytes
    retry_after: str | None  # the Retry-After header, if any


# -- what to connect to, and how -----------------------------------------------------------------

@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy: https:// servers are reached through a CONNECT tunnel, http:// ones by
    asking the proxy for the absolute URL."""

    address: tuple[str, int]
    authorization: str | None  # Proxy-Authorization, from the proxy URL's user:password
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Endpoint:
    """One API server, as this transport reaches it."""

    scheme: str
    address: tuple[str, int]
    host_header: str
    tls: ssl.SSLContext | None
    server_hostname: str              # the name TLS verifies: tls-server-name, else the host
    proxy: Proxy | None
    socket_options: tuple[tuple[int, int, int], ...]

    @property
    def verifies_tls(self) -> bool:
        return self.tls is not None and self.tls.verify_mode != ssl.CERT_NONE


def endpoint(configuration: Any) -> Endpoint:
    """The endpoint an official client `Configuration` describes; raises UnsupportedSetting
    for anything in it this transport cannot honour."""
    host = str(configuration.host)
    url = urlsplit(host)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise UnsupportedSetting("host", f"the server {host!r} is not an http:// or https:// URL")
    https = url.scheme == "https"
    try:
        port = url.port or (443 if https else 80)
    except ValueError:
        raise UnsupportedSetting("host", f"the server {host!r} has a bad port") from None
    options = configuration.socket_options or tcp_keepalive_socket_options()
    return Endpoint(
        scheme=url.scheme, address=(url.hostname, port),
        host_header=url.netloc.rpartition("@")[2],
        tls=tls_context(configuration) if https else None,
        server_hostname=configuration.tls_server_name or url.hostname,
        proxy=_proxy(configuration),
        socket_options=tuple((int(level), int(name), int(value))
                             for level, name, value in options))


def tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings of a Configuration, as one SSLContext (checked whole here, not at the
    first handshake)."""
    verify = bool(configuration.verify_ssl)
    context = ssl.create_default_context()
    ca_file = configuration.ssl_ca_cert
    if ca_file:
        if os.path.isdir(ca_file):
            raise UnsupportedSetting("ssl_ca_cert", f"{ca_file} is a directory; name the CA "
                                     "file (kubectl and client-go read a file too)")
        _load(lambda: context.load_verify_locations(cafile=ca_file), "ssl_ca_cert",
              f"{ca_file} holds no usable CA certificate")
    ca_data = configuration.ca_cert_data
    if ca_data:
        text = ca_data.decode() if isinstance(ca_data, bytes) else str(ca_data)
        _load(lambda: context.load_verify_locations(cadata=text), "ca_cert_data",
              "the CA data holds no usable certificate")
    cert_file, key_file = configuration.cert_file, configuration.key_file
    if key_file and not cert_file:
        raise UnsupportedSetting("cert_file", "a client key without a client certificate")
    if cert_file:
        def no_password() -> str:
            raise UnsupportedSetting("key_file", f"the client key {key_file or cert_file} is "
                                     "encrypted, and a kubeconfig cannot give its password: "
                                     "decrypt it (openssl pkey -in KEY -out PLAIN)")
        _load(lambda: context.load_cert_chain(cert_file, key_file, password=no_password),
              "cert_file", f"the client certificate {cert_file} and key {key_file} do not "
              "load, or do not match")
    if not verify:  # insecure-skip-tls-verify
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context


def _load(step: Callable[[], object], setting: str, message: str) -> None:
    try:
        step()
    except UnsupportedSetting:
        raise
    except (ssl.SSLError, OSError, ValueError) as err:
        raise UnsupportedSetting(setting, f"{message} ({err})") from None


def _proxy(configuration: Any) -> Proxy | None:
    url = configuration.proxy
    if not url or should_bypass_proxies(configuration.host, configuration.no_proxy or ""):
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http":
        raise UnsupportedSetting("proxy", f"the proxy {_without_password(url)}: only http:// "
                                 f"proxies are supported, not {parts.scheme}://")
    try:
        address = (parts.hostname or "", parts.port or 80)
    except ValueError:
        raise UnsupportedSetting("proxy", f"the proxy {_without_password(url)} has a bad "
                                 "port") from None
    if not address[0]:
        raise UnsupportedSetting("proxy", f"the proxy {_without_password(url)} names no host")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    headers = tuple((str(k), str(v)) for k, v in (configuration.proxy_headers or {}).items())
    return Proxy(address, authorization, headers)


def _without_password(url: str) -> str:
    """A proxy URL fit for a message: its password left out."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


# -- connections ---------------------------------------------------------------------------------

class Connections:
    """Keep-alive HTTP/1.1 connections to one endpoint, each used by one request at a time;
    at most `maxsize` idle ones are kept, the most recently used reused first."""

    def __init__(self, target: Endpoint, maxsize: int) -> None:
        self.endpoint = target
        self._maxsize = max(maxsize, 1)
        self._idle: list[_Connection] = []  # most recently used last (LIFO: warm sockets)
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, target: str, data: bytes | None, headers: dict[str, str],
                timeout: float) -> Response:
        """One request and its whole answer. Raises OSError (a timeout is one) or
        http.client.HTTPException; the connection is then closed, never reused."""
        head = self._head(method, target, headers, data)
        conn = self._take(timeout)
        before = conn.reader.received
        try:
            if conn.timeout != timeout:
                conn.sock.settimeout(timeout)
                conn.timeout = timeout
            conn.sock.sendall(head + data if data else head)
            resp, keep_alive = conn.reader.response(method)
        except BaseException as err:
            conn.close()
            if isinstance(err, TimeoutError) and conn.reader.received == before:
                self.discard_idle()  # silent, not slow: the others may be silent too
            raise
        if keep_alive and not conn.reader.buffered():
            self._give_back(conn)
        else:
            conn.close()
        return resp

    def stream(self, method: str, target: str, headers: dict[str, str],
               timeout: float) -> Stream:
        """A request whose answer is read as it comes (a watch), on a connection of its own.
        `timeout` bounds the connect and the wait for the answer's head."""
        conn = self._connect(timeout)
        try:
            conn.sock.settimeout(timeout)
            conn.sock.sendall(self._head(method, target, headers, None))
            status, reason, fields = conn.reader.head()
        except BaseException:
            conn.close()
            raise
        return Stream(conn, method, status, reason, fields)

    def discard_idle(self) -> int:
        """Close every idle connection (the next requests dial new ones); returns how many."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        return len(idle)

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.discard_idle()

    def _head(self, method: str, target: str, headers: dict[str, str],
              data: bytes | None) -> bytes:
        if self.endpoint.proxy is not None and self.endpoint.tls is None:
            # A plain-HTTP server through a proxy: the proxy is asked for the absolute URL.
            target = f"http://{self.endpoint.host_header}{target}"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.endpoint.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if data is not None:
            lines.append(f"Content-Length: {len(data)}")
        if any("\n" in line or "\r" in line for line in lines):  # no header smuggled in
            raise ValueError(f"{method} {target}: a line break in the request head")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _take(self, timeout: float) -> _Connection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(timeout)
            if not conn.dropped():
                return conn
            conn.close()

    def _connect(self, timeout: float) -> _Connection:
        target = self.endpoint
        proxy = target.proxy
        limit = min(CONNECT_TIMEOUT, timeout)
        sock = socket.create_connection(proxy.address if proxy else target.address, limit)
        try:
            for option in target.socket_options:
                sock.setsockopt(*option)
            if proxy is not None and target.tls is not None:
                _tunnel(sock, target, proxy)
            if target.tls is not None:
                sock = target.tls.wrap_socket(sock, server_hostname=target.server_hostname)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock, limit)

    def _give_back(self, conn: _Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._maxsize:
                self._idle.append(conn)
                return
        conn.close()


def _tunnel(sock: socket.socket, target: Endpoint, proxy: Proxy) -> None:
    """Ask an HTTP proxy for a tunnel to the server (RFC 9110, CONNECT)."""
    authority = f"{target.address[0]}:{target.address[1]}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    lines += [f"{name}: {value}" for name, value in proxy.headers]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    reader = _Reader(sock)
    status, reason, _ = reader.head()
    if status != 200:
        raise OSError(f"the proxy {proxy.address[0]}:{proxy.address[1]} refused a tunnel to "
                      f"{authority}: {status} {reason}")
    if reader.buffered():
        raise http.client.HTTPException("the proxy sent bytes after accepting the tunnel")


class _Connection:
    """One connected socket (plain, or TLS verified against the endpoint's server name) and
    the reader its answers are parsed by."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.reader = _Reader(sock)
        self.timeout = timeout  # the timeout now set on the socket

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

    def describe(self) -> str:
        """local -> remote address, for a log line about this connection."""
        try:
            ends = self.sock.getsockname(), self.sock.getpeername()
        except OSError:
            return "a closed connection"
        local, peer = (f"{end[0]}:{end[1]}" if isinstance(end, tuple) else str(end)
                       for end in ends)
        return f"{local} -> {peer}"

    def close(self) -> None:
        self.sock.close()


# -- reading answers -----------------------------------------------------------------------------

# The only headers an answer is read for; the apiserver sends about ten per answer.
_WANTED = {name.encode(): name for name in
           ("connection", "transfer-encoding", "content-length", "retry-after")}


class _Reader:
    """HTTP/1.x answers parsed from what the socket delivers, buffered here.

    Only what RFC 9112 asks of a client reading the answer to its own request: interim 1xx
    answers skipped, the body framed by chunked transfer coding, else by Content-Length, else
    by the end of the connection. A timeout leaves the reader as it was (a stream may be read
    on after one). A malformed answer raises http.client's exceptions.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""
        self._pos = 0  # bytes of _buf already consumed
        self.received = 0  # bytes received so far
        self.last_byte_at = time.monotonic()

    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def response(self, method: str) -> tuple[Response, bool]:
        """One whole answer: (the response, whether the connection may be reused)."""
        status, reason, fields = self.head()
        keep_alive = fields.get("version") == "HTTP/1.1" and \
            "close" not in fields.get("connection", "").lower()
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in fields:
            body = self.exactly(_number(fields["content-length"], 10))
        else:
            body, keep_alive = self.to_end(), False
        return Response(status, reason, body, fields.get("retry-after")), keep_alive

    def head(self) -> tuple[int, str, dict[str, str]]:
        """The status, reason and wanted headers of the final (non-1xx) answer; the headers
        also hold "version"."""
        while True:  # the common case: the head arrives in one recv, and is split at once
            if not self.buffered():
                self.fill()  # at the end, the line by line path below says so
            whole = self._whole_head()
            if whole is None:
                break
            if whole[0] >= 200:
                return whole
        while True:
            line = self.line()
            if not line:
                raise http.client.RemoteDisconnected("the server closed the connection "
                                                     "without an answer")
            version, _, rest = line.partition(b" ")
            code, _, reason = rest.partition(b" ")
            if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
                raise http.client.BadStatusLine(repr(line[:100]))
            status = int(code)
            fields = self.fields()
            if status >= 200:
                break
        fields["version"] = version.decode("latin-1")
        return status, reason.strip().decode("latin-1"), fields

    def _whole_head(self) -> tuple[int, str, dict[str, str]] | None:
        """The next head at once, when all of it is buffered with CRLF line ends, a status line
        and at most MAX_HEADERS headers (the common case: a write's answer comes in one recv);
        else None, nothing consumed, and the line by line path reads it (and raises what it
        raises)."""
        try:
            end = self._buf.index(b"\r\n\r\n", self._pos)
        except ValueError:  # not all of it yet
            return None
        lines = self._buf[self._pos:end].split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        # No line can be longer than MAX_LINE here: they are all in what one recv brought.
        if (len(lines) > MAX_HEADERS + 1 or not version.startswith(b"HTTP/1.")
                or len(code) != 3 or not code.isdigit()
                or self._buf.count(b"\n", self._pos, end) != len(lines) - 1):  # a bare LF
            return None
        found: dict[str, str] = {"version": version.decode("latin-1")}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            wanted = _WANTED.get(name.strip().lower()) if colon else None
            if wanted is not None:
                found[wanted] = value.strip().decode("latin-1")
        self._pos = end + 4
        return int(code), reason.strip().decode("latin-1"), found

    def fields(self) -> dict[str, str]:
        """Header lines up to the blank one; only the wanted ones kept, by lower-case name."""
        found: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self.line()
            if line in (b"\r\n", b"\n"):
                return found
            if not line:
                raise http.client.IncompleteRead(b"")  # the connection ended inside the head
            name, colon, value = line.partition(b":")
            wanted = _WANTED.get(name.strip().lower()) if colon else None
            if wanted is not None:
                found[wanted] = value.strip().decode("latin-1")
        raise http.client.HTTPException(f"more than {MAX_HEADERS} headers")

    def line(self) -> bytes:
        """The next line with its line break (b"" at the end of the connection, or what was
        left of a last line without one)."""
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end >= 0:
                line = self._buf[self._pos:end + 1]
                self._pos = end + 1
                if len(line) > MAX_LINE:
                    raise http.client.LineTooLong("header line")
                return line
            if self.buffered() > MAX_LINE:
                raise http.client.LineTooLong("header line")
            if not self.fill():
                line = self._buf[self._pos:]
                self._buf, self._pos = b"", 0
                return line

    def some(self, limit: int) -> bytes:
        """Up to `limit` bytes (at least one, waiting for them), b"" at the end."""
        if not self.buffered() and not self.fill():
            return b""
        data = self._buf[self._pos:self._pos + limit]
        self._pos += len(data)
        return data

    def exactly(self, size: int) -> bytes:
        buffered = self.buffered()
        if buffered >= size:
            data = self._buf[self._pos:self._pos + size]
            self._pos += size
            return data
        # A large body: received straight into its own buffer, no copies on the way.
        out = bytearray(size)
        out[:buffered] = self._buf[self._pos:]
        self._buf, self._pos = b"", 0
        view, got = memoryview(out), buffered
        while got < size:
            count = self._sock.recv_into(view[got:], min(size - got, 1 << 20))
            if not count:
                raise http.client.IncompleteRead(bytes(out[:got]), size - got)
            got += count
            self.received += count
        self.last_byte_at = time.monotonic()
        return bytes(out)

    def to_end(self) -> bytes:
        while self.fill():
            pass
        data = self._buf[self._pos:]
        self._buf, self._pos = b"", 0
        return data

    def whole_chunk(self) -> bytes | None:
        """The next chunk's data when all of it, with its size line and CRLF, is buffered and
        it is not the last one (a watch event, as the server sends it); else None, nothing
        consumed."""
        buf, pos = self._buf, self._pos
        try:
            eol = buf.index(b"\r\n", pos)
            size = int(buf[pos:eol], 16)  # an extension, say: the slow path reads it
        except ValueError:
            return None
        start = eol + 2
        if size > 0 and buf[start + size:start + size + 2] == b"\r\n":
            self._pos = start + size + 2
            return buf[start:start + size]
        return None

    def chunk_size(self) -> int:
        """The size of the next chunk (0: the last one, its trailer read too)."""
        size = _number(self.line().split(b";", 1)[0], 16)
        if size == 0:
            self.fields()  # the trailer, up to its blank line
        return size

    def chunk_end(self) -> None:
        if self.line() not in (b"\r\n", b"\n"):
            raise http.client.HTTPException("a chunk not followed by CRLF")

    def _chunked(self) -> bytes:
        chunks = []
        while size := self.chunk_size():
            chunks.append(self.exactly(size))
            self.chunk_end()
        return b"".join(chunks)

    def fill(self) -> bool:
        """Receive what the socket has (waiting up to its timeout); False at its end."""
        data = self._sock.recv(_RECV)
        if not data:
            return False
        self.received += len(data)
        self.last_byte_at = time.monotonic()
        if self._pos == len(self._buf):
            self._buf, self._pos = data, 0
        else:
            self._buf, self._pos = self._buf[self._pos:] + data, 0
        return True


def _number(text: str | bytes, base: int) -> int:
    try:
        value = int(text.strip(), base)
    except ValueError:
        raise http.client.HTTPException(f"not a number: {text[:40]!r}") from None
    if value < 0:
        raise http.client.HTTPException(f"a negative length: {value}")
    return value


class Stream:
    """An answer read as it arrives, on a connection of its own (a watch)."""

    def __init__(self, conn: _Connection, method: str, status: int, reason: str,
                 fields: dict[str, str]) -> None:
        self._conn = conn
        self.status = status
        self.reason = reason
        self.retry_after = fields.get("retry-after")
        self.connection = conn.describe()
        # How the body ends: chunked, after `_left` bytes, or with the connection.
        self._chunked = "chunked" in fields.get("transfer-encoding", "").lower()
        self._left: int | None = None
        if method == "HEAD" or status in (204, 304):
            self._left = 0
        elif not self._chunked and "content-length" in fields:
            self._left = _number(fields["content-length"], 10)
        self._chunk_left = 0
        self._ended = False
        self._lock = threading.Lock()
        self._closed = False

    @property
    def last_byte_at(self) -> float:
        """When (time.monotonic()) the last byte arrived."""
        return self._conn.reader.last_byte_at

    def read(self, timeout: float) -> bytes:
        """The next bytes of the body, b"" at its end. Raises TimeoutError when no byte came
        for `timeout` seconds; the stream can be read on after that."""
        if self._ended:
            return b""
        reader = self._conn.reader
        self._conn.sock.settimeout(timeout)
        if self._left is not None and not self._chunked:
            data = reader.some(self._left) if self._left else b""
            self._left -= len(data)
            if not self._left:
                self._ended = True
            elif not data:
                raise http.client.IncompleteRead(b"", self._left)
            return data
        if not self._chunked:
            data = reader.some(_RECV)
            self._ended = not data
            return data
        while True:
            if self._chunk_left == 0:
                if not reader.buffered():
                    reader.fill()  # the next chunk, waited for (at the end: see chunk_size)
                whole = reader.whole_chunk()
                if whole is not None:
                    return whole
                size = reader.chunk_size()
                if size == 0:
                    self._ended = True
                    return b""
                self._chunk_left = size
            data = reader.some(self._chunk_left)
            if not data:
                raise http.client.IncompleteRead(b"", self._chunk_left)
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                reader.chunk_end()
            return data

    def read_all(self, timeout: float) -> bytes:
        """The rest of the body (an error's answer)."""
        parts = []
        while data := self.read(timeout):
            parts.append(data)
        return b"".join(parts)

    def close(self) -> None:
        """End the stream; safe from another thread, where it also ends a read in progress."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):  # not connected any more: nothing to wake
            self._conn.sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked on it
        self._conn.close()

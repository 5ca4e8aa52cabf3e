"""The wire to one API server: keep-alive HTTP/1.1 over TCP or TLS, and long-lived streams.

Why not urllib3, the official client's transport: CPU per write is what limits a fan-out on a
small machine, and going through urllib3's layers cost three times as much (measured
single-threaded: 2.0 ms -> 0.6 ms of CPU per create). Here a request is written in one send
(its head and body together) and its answer parsed from what one recv brought in.

Why not h11 (the well-kept sans-IO HTTP/1.1 library) for the framing: it cost more than the
10% per write it was allowed (two runs each of `bench_convergence.py --sources 1 --namespaces
5000`: 0.86 and 0.97 s of the operator's CPU per 1,000 writes with h11, 0.76 and 0.60 s with
this reader; one create and its 2 KB answer over a socket pair, 181 us of CPU with h11, 38 us
here): h11 validates every header with regular expressions and builds an event per part,
where the answer to a write needs four headers and one split. h11 is the reference instead:
the parser below reads every answer the way h11 does (tests/unit/test_transport_h11.py).

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

A new TLS connection resumes the session of an earlier one of the same pool (same server, same
server name, same SSLContext) when the server allows it: a pool dials up to one connection per
worker, and a new connection (connect, handshake, one request) costs the client 4.2M
instructions resumed against 7.3M with a full handshake (6.9M with an RSA certificate; counted
with callgrind, Python 3.11 and OpenSSL 3.0). The server's certificate was verified, for this
server name, when the session was made; a server that does not resume it (a restart gives it
new ticket keys) makes a full handshake, verified as ever. The session is read from a
connection that made a full handshake, once its first answer is in (TLS 1.3 sends tickets after
the handshake), and only then: reading one costs 1.6M instructions (the ssl module copies it,
certificate and all). The newest is kept, and dropped when a handshake offering it fails or the
server declines it; a server that declines more than it resumes is offered none (`_Sessions`).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import re
import select
import socket
import ssl
import threading
import time
import weakref
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
    for anything in it this transport cannot honour.

    Built once per configuration: asked again for the same configuration object, its
    settings unchanged (kube.load_configuration checks it, then Kube connects with it), the
    same endpoint is returned, TLS context and all (loading the CA bundle costs milliseconds).
    """
    settings = _settings(configuration)
    with _ENDPOINTS_LOCK:
        known = _ENDPOINTS.get(configuration)
    if known is not None and known[0] == settings:
        return known[1]
    built = _endpoint(configuration)
    with _ENDPOINTS_LOCK:
        _ENDPOINTS[configuration] = (settings, built)
    return built


# The endpoint built for each configuration (while it lives), with the settings it read.
_ENDPOINTS: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], Endpoint]] = \
    weakref.WeakKeyDictionary()
_ENDPOINTS_LOCK = threading.Lock()


def _settings(configuration: Any) -> tuple[Any, ...]:
    """Every Configuration attribute an endpoint is built from."""
    return (configuration.host, configuration.ssl_ca_cert, configuration.ca_cert_data,
            configuration.cert_file, configuration.key_file, configuration.verify_ssl,
            configuration.tls_server_name, configuration.assert_hostname,
            configuration.proxy, configuration.no_proxy,
            tuple((configuration.proxy_headers or {}).items()),
            tuple(map(tuple, configuration.socket_options or ())))


def _endpoint(configuration: Any) -> Endpoint:
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
        self._sessions = _Sessions()  # TLS: what the next connection offers to resume
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
        if conn.session_due:
            self._keep_session(conn)
        if keep_alive and not conn.reader.buffered():
            self._give_back(conn)
        else:
            conn.close()
        return resp

    def stream(self, method: str, target: str, headers: dict[str, str],
               timeout: float, reuse: float | None = None) -> Stream:
        """A request whose answer is read as it comes (a watch), on a connection of its own.
        `timeout` bounds the connect and the wait for the answer's head. With `reuse` (a
        short watch: an informer's probe), an idle connection is taken first when there is
        one, and a new one dialled only when that one says nothing within `reuse` seconds (a
        silent connection: the other idle ones are dropped too, as in request()), and the
        stream, once read to its end, gives its connection back to the pool when closed."""
        head = self._head(method, target, headers, None)
        if reuse is not None:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is not None:
                before = conn.reader.received
                try:
                    return self._send_for_stream(conn, head, method, min(reuse, timeout), True)
                except (OSError, http.client.HTTPException) as err:
                    if isinstance(err, TimeoutError) and conn.reader.received == before:
                        self.discard_idle()
        return self._send_for_stream(self._connect(timeout), head, method, timeout,
                                     reuse is not None)

    def _send_for_stream(self, conn: _Connection, head: bytes, method: str,
                         timeout: float, give_back: bool) -> Stream:
        try:
            conn.sock.settimeout(timeout)
            conn.timeout = timeout
            conn.sock.sendall(head)
            answer = conn.reader.head()
        except BaseException:
            conn.close()
            raise
        if conn.session_due:
            self._keep_session(conn)
        return Stream(conn, method, answer, self if give_back else None)

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
        text = "\r\n".join(lines)
        # No header smuggled in: the only line breaks are those joining the lines.
        if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
            raise ValueError(f"{method} {target}: a line break in the request head")
        return (text + "\r\n\r\n").encode("latin-1")

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
                return self._handshake(sock, target.tls, limit)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock, limit)

    def _handshake(self, sock: socket.socket, tls: ssl.SSLContext,
                   timeout: float) -> _Connection:
        """TLS over `sock`, offering the session kept (the server resumes it, or makes a full,
        verified handshake)."""
        session = self._sessions.offer()
        try:
            wrapped = tls.wrap_socket(sock, server_hostname=self.endpoint.server_hostname,
                                      session=session)
        except BaseException:
            self._sessions.declined(session)
            raise
        if wrapped.session_reused:
            self._sessions.resumed()
            return _Connection(wrapped, timeout)
        self._sessions.declined(session)  # restarted, keys rotated, or another server
        return _Connection(wrapped, timeout, session_due=self._sessions.wanted())

    def _keep_session(self, conn: _Connection) -> None:
        """Keep the session of a connection that made a full handshake, once it has read its
        first answer (where TLS 1.3's tickets arrive), if it has a ticket to resume it with
        (Go's crypto/tls, the API server's, resumes no other kind)."""
        conn.session_due = False
        session = conn.sock.session if isinstance(conn.sock, ssl.SSLSocket) else None
        if session and session.has_ticket:
            self._sessions.keep(session)

    def _give_back(self, conn: _Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._maxsize:
                self._idle.append(conn)
                return
        conn.close()


class _Sessions:
    """The TLS session a pool offers its next connection (to its one server name), and whether
    offering one pays.

    A declined offer costs more than a full handshake alone: the ssl module copies a session,
    certificate and all, each time one is offered or read. A balancer that spreads connections
    over servers with ticket keys of their own (the in-cluster `kubernetes` Service over
    several API servers) declines most offers; so once the server has declined more sessions
    than it resumed handshakes, the pool reads and offers none any more.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: ssl.SSLSession | None = None  # offered next: the newest kept, if any
        self._resumed = 0   # handshakes the server resumed
        self._declined = 0  # sessions dropped (declined, or a handshake offering one failed);
                            # more than _resumed: no session is read or offered any more

    def offer(self) -> ssl.SSLSession | None:
        with self._lock:
            return self._session

    def wanted(self) -> bool:
        """Whether a new connection's session is worth reading."""
        with self._lock:
            return self._declined <= self._resumed

    def keep(self, session: ssl.SSLSession) -> None:
        with self._lock:
            self._session = session

    def resumed(self) -> None:
        with self._lock:
            self._resumed += 1

    def declined(self, session: ssl.SSLSession | None) -> None:
        """Offer `session` no more (unless a newer one replaced it already)."""
        with self._lock:
            if session is not None and self._session is session:
                self._session = None
                self._declined += 1


def _tunnel(sock: socket.socket, target: Endpoint, proxy: Proxy) -> None:
    """Ask an HTTP proxy for a tunnel to the server (RFC 9110, CONNECT)."""
    authority = f"{target.address[0]}:{target.address[1]}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    lines += [f"{name}: {value}" for name, value in proxy.headers]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    reader = _Reader(sock)
    head = reader.head()
    if head.status != 200:
        raise OSError(f"the proxy {proxy.address[0]}:{proxy.address[1]} refused a tunnel to "
                      f"{authority}: {head.status} {head.reason}")
    if reader.buffered():
        raise http.client.HTTPException("the proxy sent bytes after accepting the tunnel")


class _Connection:
    """One connected socket (plain, or TLS verified against the endpoint's server name, now
    or when the session it resumed was made) and the reader its answers are parsed by."""

    def __init__(self, sock: socket.socket, timeout: float, session_due: bool = False) -> None:
        self.sock = sock
        self.reader = _Reader(sock)
        self.timeout = timeout  # the timeout now set on the socket
        self.session_due = session_due  # a full TLS handshake: read its session after an answer

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
#
# One parser, for the answers to requests (read whole) and for streams (read as they come):
# each rule of RFC 9112 a client reading its own answers needs is written once, below, and
# follows h11 wherever h11 has a rule (tests/unit/test_transport_h11.py holds it to that on
# generated answers cut at random receive boundaries). Only the header fields that frame the
# body or are read (Connection, Content-Length, Transfer-Encoding, Retry-After) are checked
# value by value; any other line must be `name: value` with no blank before the colon, and is
# skipped (h11 also checks its name and value characters, which change nothing read here).

_WANTED = frozenset((b"connection", b"content-length", b"transfer-encoding", b"retry-after"))
_WANTED_LENGTHS = frozenset(map(len, _WANTED))
_BLANKS = b" \t"
_STATUS_LINE = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: (.*))?", re.DOTALL)
_BLANK_LINE = re.compile(rb"\n\r?\n")  # the end of a head (or trailer): lines end in LF or CRLF
_FIELD_VALUE = re.compile(rb"[^\x00\s]+(?:[ \t]+[^\x00\s]+)*|")  # RFC 9110 5.5, as h11 reads it
_HEX = b"0123456789abcdefABCDEF"
_MAX_DIGITS = 20  # of a Content-Length or a chunk size (h11's limit too)


class Head(NamedTuple):
    """The status line of an answer and what its header fields say."""

    version: str              # "1.1"
    status: int
    reason: str
    length: int | None        # Content-Length
    chunked: bool             # Transfer-Encoding: chunked
    close: bool               # the connection ends after this answer (Connection: close, 1.0)
    retry_after: str | None   # the Retry-After header, if any (the last one)


def _parse_head(lines: list[bytes]) -> Head:
    """A head from its lines (line breaks removed); raises http.client's exceptions."""
    if not lines:
        raise http.client.BadStatusLine("an empty line where the status line belongs")
    matched = _STATUS_LINE.fullmatch(lines[0])
    if matched is None or matched[2] < b"100":
        raise http.client.BadStatusLine(repr(lines[0][:100]))
    if matched[2] == b"101":  # no request here ever asks to switch protocols
        raise http.client.HTTPException("101 Switching Protocols, and no upgrade was asked")
    if len(lines) > MAX_HEADERS + 1:
        raise http.client.HTTPException(f"more than {MAX_HEADERS} headers")
    version = matched[1]
    length, chunked, close, retry_after = _fields(lines[1:])
    return Head(version.decode(), int(matched[2]), (matched[3] or b"").decode("latin-1"),
                length, chunked, close or version < b"1.1", retry_after)


def _fields(lines: list[bytes]) -> tuple[int | None, bool, bool, str | None]:
    """What header (or trailer) lines say: (Content-Length, chunked, Connection: close,
    Retry-After); raises http.client.HTTPException for a line that is no field, or a field
    read here whose value is malformed."""
    length: bytes | None = None
    chunked = close = False
    retry_after: bytes | None = None
    # A line that starts with a blank continues the one before; min() finds any line that
    # starts with a byte up to the blank's in one pass (the common head has none).
    if lines and min(lines)[:1] <= b" " and any(line[:1] in (b" ", b"\t") for line in lines):
        lines = _unfolded(lines)
    for line in lines:
        colon = line.find(b":")
        if colon <= 0 or line[colon - 1] in _BLANKS:  # no name, or a blank before the colon
            raise http.client.HTTPException(f"not a header field: {line[:100]!r}")
        if colon not in _WANTED_LENGTHS:  # most fields: not one read here (nothing copied)
            continue
        name, value = line[:colon].lower(), line[colon + 1:]
        if name not in _WANTED:
            continue
        value = value.strip(b" \t")
        if _FIELD_VALUE.fullmatch(value) is None:
            raise http.client.HTTPException(f"a control character in {name.decode()}")
        if name == b"content-length":
            length = _content_length(value, length)
        elif name == b"transfer-encoding":
            if chunked or value.lower() != b"chunked":  # as h11: chunked, once, and only
                raise http.client.HTTPException(
                    f"unsupported Transfer-Encoding: {value[:40]!r}")
            chunked = True
        elif name == b"connection":
            close = close or b"close" in [token.strip(b" \t").lower()
                                          for token in value.split(b",")]
        else:
            retry_after = value
    return (None if length is None else int(length), chunked, close,
            None if retry_after is None else retry_after.decode("latin-1"))


def _unfolded(fields: list[bytes]) -> list[bytes]:
    """Header lines with obsolete line folding undone: a line that starts with a blank
    continues the one before (RFC 9112 5.2: replaced by one space)."""
    if fields[0][:1] in (b" ", b"\t"):
        raise http.client.HTTPException("a continuation line before any header field")
    out: list[bytes] = []
    for line in fields:
        if line[:1] in (b" ", b"\t"):
            out[-1] += b" " + line.lstrip(b" \t")
        else:
            out.append(line)
    return out


def _content_length(value: bytes, seen: bytes | None) -> bytes:
    """The digits of a Content-Length field; a list of equal lengths is one (RFC 9110 8.6)."""
    lengths = {part.strip(b" \t") for part in value.split(b",")}
    length = lengths.pop()
    if lengths or not length.isdigit() or len(length) > _MAX_DIGITS:
        raise http.client.HTTPException(f"not a Content-Length: {value[:40]!r}")
    if seen is not None and seen != length:
        raise http.client.HTTPException("two different Content-Length fields")
    return length


class _Reader:
    """What the socket delivers, buffered, and the framing read off it: heads, chunk sizes,
    the CRLF that ends a chunk, trailers, and bytes of a body (see `_Body` for where a body
    ends). A read waits for all it needs before it consumes any of it, so a timeout leaves
    the reader as it was (a stream may be read on after one). At the end of the connection
    where more is needed, and for anything malformed, raises http.client's exceptions.
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
        head = self.head()
        body = _Body(method, head)
        return (Response(head.status, head.reason, body.rest(self), head.retry_after),
                body.reusable)

    def head(self) -> Head:
        """The head of the final (non-1xx) answer; interim 1xx ones are skipped."""
        while True:
            if not self.buffered() and not self.fill():
                raise http.client.RemoteDisconnected("the server closed the connection "
                                                     "without an answer")
            head = _parse_head(self.lines())
            if head.status >= 200:
                return head

    def lines(self) -> list[bytes]:
        """The lines up to the next blank one (a head, or a trailer), without their line
        breaks (LF or CRLF), consumed."""
        scanned = 0  # bytes after _pos searched for the blank line (and counted)
        line_start = 0  # where the last line begins, after _pos
        breaks = 0  # line breaks among the bytes scanned
        while True:
            buf, pos = self._buf, self._pos
            if buf.startswith(b"\n", pos) or buf.startswith(b"\r\n", pos):
                self._pos = buf.index(b"\n", pos) + 1
                return []
            end = _BLANK_LINE.search(buf, pos + max(scanned - 2, 0))
            if end is not None:
                break
            # Not all of it yet: the limits hold on what is buffered, then wait for more.
            start = pos + scanned
            last = buf.rfind(b"\n", start)
            if last >= 0:
                line_start = last + 1 - pos
            breaks += buf.count(b"\n", start)
            scanned = len(buf) - pos
            if scanned - line_start > MAX_LINE:
                raise http.client.LineTooLong("header line")
            if breaks > MAX_HEADERS + 1:
                raise http.client.HTTPException(f"more than {MAX_HEADERS} headers")
            if not self.fill():
                raise http.client.IncompleteRead(b"")  # the connection ended inside a head
        block = buf[pos:end.start() + 1]  # every line with its line break
        self._pos = end.end()
        if block.count(b"\n") == block.count(b"\r\n"):  # the common case: CRLF throughout
            lines = block.split(b"\r\n")
        else:
            lines = [line[:-1] if line.endswith(b"\r") else line
                     for line in block.split(b"\n")]
        del lines[-1]
        if len(block) > MAX_LINE - 2 and max(map(len, lines)) > MAX_LINE - 2:
            raise http.client.LineTooLong("header line")
        return lines

    def chunk_size(self) -> int:
        """The size in the next chunk's size line (RFC 9112 7.1: hex digits, then perhaps
        extensions, which are ignored), consumed; 0 for the last chunk."""
        buf, pos = self._buf, self._pos
        eol = buf.find(b"\r\n", pos)
        while eol < 0:
            scanned = len(buf) - pos
            if scanned > MAX_LINE:
                raise http.client.LineTooLong("chunk size line")
            if not self.fill():
                raise http.client.IncompleteRead(b"")
            buf, pos = self._buf, self._pos
            eol = buf.find(b"\r\n", pos + max(scanned - 1, 0))
        line = buf[pos:eol]
        size, semicolon, _ = line.partition(b";")
        if not semicolon:
            size = size.rstrip(b" \t")
        if not size or size.strip(_HEX) or len(size) > _MAX_DIGITS or b"\n" in line:
            raise http.client.HTTPException(f"not a chunk size line: {line[:40]!r}")
        self._pos = eol + 2
        return int(size, 16)

    def chunk_end(self) -> None:
        """The CRLF after a chunk's data, consumed."""
        while self.buffered() < 2:
            if not self.fill():
                raise http.client.IncompleteRead(b"")
        if not self._buf.startswith(b"\r\n", self._pos):
            raise http.client.HTTPException("a chunk not followed by CRLF")
        self._pos += 2

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


class _Body:
    """Where one answer's body ends, the one place that decides it (RFC 9112 6.3): no body
    (a HEAD request, 204, 304); chunked; after Content-Length bytes; else with the
    connection."""

    def __init__(self, method: str, head: Head) -> None:
        self.chunked = False
        # Bytes left: of the body, or (chunked) of the chunk being read; None: up to the end
        # of the connection.
        self.left: int | None
        if method == "HEAD" or head.status in (204, 304):
            self.left = 0
        elif head.chunked:
            self.chunked, self.left = True, 0
        else:
            self.left = head.length
        self.ended = self.left == 0 and not self.chunked
        self.reusable = not head.close and self.left is not None  # the connection, after it
        self._crlf_due = False  # a chunk's data was read, its CRLF not yet

    def read(self, reader: _Reader, limit: int = _RECV) -> bytes:
        """The next bytes of the body (at most `limit`, at least one, waiting for them);
        b"" at its end."""
        if self.ended:
            return b""
        if self.chunked and not self.left:
            if self._crlf_due:
                reader.chunk_end()
                self._crlf_due = False
            self.left = reader.chunk_size()
            if not self.left:
                _fields(reader.lines())  # the trailer: checked as a head's fields, unused
                self.ended = True
                return b""
        if self.left is None:
            data = reader.some(limit)
            self.ended = not data
            return data
        data = reader.some(min(self.left, limit))
        if not data:
            raise http.client.IncompleteRead(b"", self.left)
        self.left -= len(data)
        if not self.left:
            self._crlf_due = self.chunked
            self.ended = not self.chunked
        return data

    def rest(self, reader: _Reader) -> bytes:
        """All that is left of the body."""
        if not self.chunked and self.left:  # received whole, into one buffer
            data, self.left, self.ended = reader.exactly(self.left), 0, True
            return data
        parts = []
        while data := self.read(reader):
            parts.append(data)
        return b"".join(parts)


class Stream:
    """An answer read as it arrives, on a connection of its own (a watch)."""

    def __init__(self, conn: _Connection, method: str, head: Head,
                 pool: Connections | None = None) -> None:
        self._conn = conn
        self._pool = pool  # where the connection goes back to after a body read to its end
        self.status = head.status
        self.reason = head.reason
        self.retry_after = head.retry_after
        self.connection = conn.describe()
        self._body = _Body(method, head)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def last_byte_at(self) -> float:
        """When (time.monotonic()) the last byte arrived."""
        return self._conn.reader.last_byte_at

    def read(self, timeout: float) -> bytes:
        """The next bytes of the body (a whole chunk, when one is buffered), b"" at its end.
        Raises TimeoutError when no byte came for `timeout` seconds; the stream can be read
        on after that."""
        if self._body.ended:
            return b""
        if self._conn.timeout != timeout:
            self._conn.sock.settimeout(timeout)
            self._conn.timeout = timeout
        return self._body.read(self._conn.reader)

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
        if self._pool is not None and self._body.ended and self._body.reusable \
                and not self._conn.reader.buffered():
            self._pool._give_back(self._conn)  # read to its end: nothing is reading it
            return
        with contextlib.suppress(OSError):  # not connected any more: nothing to wake
            self._conn.sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked on it
        self._conn.close()

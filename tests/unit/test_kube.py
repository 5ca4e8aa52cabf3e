"""What an API failure means is decided in one place: kube.classify. How requests travel:
credentials read once a second, keep-alive connections reused until the server closes them."""

from __future__ import annotations

import http.client
import http.server
import io
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from configmirror.clock import FakeClock
from configmirror.kube import (
    AUTH_REFRESH,
    CONFIGMAPS,
    ApiError,
    Failure,
    Kube,
    _read_response,
    classify,
    resource_of,
)
from configmirror_testing.localserver import LocalServer


@pytest.mark.parametrize(("status", "failure"), [
    (0, Failure.UNAVAILABLE),      # no answer at all
    (429, Failure.UNAVAILABLE),    # API Priority and Fairness: slow down
    (500, Failure.UNAVAILABLE),
    (503, Failure.UNAVAILABLE),
    (504, Failure.UNAVAILABLE),
    (409, Failure.CONFLICT),       # stale resourceVersion, or AlreadyExists
    (404, Failure.NOT_FOUND),
    (403, Failure.REJECTED),       # forbidden: the permission's fault
    (422, Failure.REJECTED),       # invalid: the object's fault
    (400, Failure.REJECTED),
    (413, Failure.REJECTED),
])
def test_every_status_has_one_meaning(status: int, failure: Failure) -> None:
    assert classify(status) is failure
    assert ApiError(status, "R", "m", "create", "/x").failure is failure


def test_a_terminating_namespace_is_recognised_in_a_403() -> None:
    err = ApiError(403, "Forbidden", 'unable to create new content in namespace x because it '
                   'is being terminated', "create", "/api/v1/namespaces/x/configmaps")
    assert err.namespace_terminating and err.failure is Failure.REJECTED
    assert not ApiError(403, "Forbidden", "nope", "create", "/p").namespace_terminating


def test_an_error_names_the_verb_path_status_and_message_and_keeps_retry_after() -> None:
    err = ApiError(429, "TooManyRequests", "slow down", "update", "/p", retry_after=3.0)
    assert str(err) == "update /p: 429 TooManyRequests: slow down"
    assert err.retry_after == 3.0


def test_resource_paths() -> None:
    assert CONFIGMAPS.collection() == "/api/v1/configmaps"
    assert CONFIGMAPS.collection("a") == "/api/v1/namespaces/a/configmaps"
    assert CONFIGMAPS.item("a", "b") == "/api/v1/namespaces/a/configmaps/b"
    assert resource_of(CONFIGMAPS.item("a", "b")) == "configmaps"
    assert resource_of("/api/v1/namespaces/a") == "namespaces"


def test_credentials_are_read_from_the_configuration_once_per_refresh_period() -> None:
    configuration = client.Configuration(host="https://127.0.0.1:1")
    configuration.api_key = {"BearerToken": "one"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    refreshes = []
    configuration.refresh_api_key_hook = refreshes.append
    clock = FakeClock()
    kube = Kube(configuration, clock=clock)
    try:
        for _ in range(100):
            assert kube._headers(None)["authorization"] == "Bearer one"
        assert len(refreshes) == 1, "not once per request: the hook re-reads the environment"
        configuration.api_key = {"BearerToken": "two"}  # the loader renewed the token
        clock.step(AUTH_REFRESH)
        assert kube._headers("application/json")["authorization"] == "Bearer two"
        assert len(refreshes) == 2
    finally:
        kube.close()


class Server:
    """A local plain-HTTP/1.1 server answering every POST with `{}`; records the client port
    of each request (one port per connection)."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.hang_up_next = False  # close the connection after the next answer, unannounced
        self.hung_up = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.ports.append(self.client_address[1])
                self.send_response(201)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                if outer.hang_up_next:
                    outer.hang_up_next = False
                    self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                pass

        class HTTPServer(http.server.ThreadingHTTPServer):
            def shutdown_request(self, request: Any) -> None:
                super().shutdown_request(request)  # the socket is closed only here, after
                outer.hung_up.set()                # the handler's finish(): signal then

        self.local = LocalServer(Handler, server_class=HTTPServer)
        self.url = self.local.url

    def stop(self) -> None:
        self.local.stop()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.stop()


@pytest.fixture
def kube(server: Server) -> Iterator[Kube]:
    kube = Kube(client.Configuration(host=server.url))
    yield kube
    kube.close()


def create(kube: Kube) -> object:
    return kube.request("create", CONFIGMAPS.collection("a"), body={"data": {}})


def test_requests_in_turn_reuse_one_keep_alive_connection(server: Server, kube: Kube) -> None:
    for _ in range(5):
        assert create(kube) == {}
    assert len(server.ports) == 5 and len(set(server.ports)) == 1


def test_an_idle_connection_the_server_closed_is_replaced_before_use(
        server: Server, kube: Kube) -> None:
    server.hang_up_next = True
    create(kube)
    assert server.hung_up.wait(5), "the server closes the connection"
    assert create(kube) == {}, "the next request goes out on a new connection"
    assert len(set(server.ports)) == 2


def test_no_answer_is_an_api_error_with_status_0() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = Kube(client.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(ApiError) as raised:
            create(kube)
    finally:
        kube.close()
    assert raised.value.status == 0 and raised.value.failure is Failure.UNAVAILABLE


def test_a_line_break_never_reaches_the_request_head(server: Server, kube: Kube) -> None:
    with pytest.raises(ValueError, match="line break"):
        kube.request("create", "/api/v1/namespaces/a/configmaps\r\nX-Evil: 1", body={})
    assert server.ports == [], "nothing was sent"


@pytest.mark.parametrize(("raw", "body", "reusable"), [
    (b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", b"{}", True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\n{\"a\r\n4;ext=1\r\n\": 1\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n", b'{"a": 1}', True),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", b"{}", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", b"{}", False),
    (b"HTTP/1.1 200 OK\r\n\r\n{\"until\": \"the end\"}", b'{"until": "the end"}', False),
])
def test_an_answer_is_framed_as_http_1_1_says(raw: bytes, body: bytes, reusable: bool) -> None:
    response, keep_alive = _read_response(io.BytesIO(raw), "GET")
    assert (response.data, keep_alive) == (body, reusable)


def test_an_answer_keeps_its_status_reason_and_retry_after() -> None:
    raw = (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}"
           b"HTTP/1.1 200 OK\r\n")  # the next answer's bytes stay unread
    stream = io.BytesIO(raw)
    response, _ = _read_response(stream, "POST")
    assert (response.status, response.reason, response.retry_after) == \
        (429, "Too Many Requests", "3")
    assert stream.read() == b"HTTP/1.1 200 OK\r\n"


@pytest.mark.parametrize("raw", [
    b"",                                                       # closed before any answer
    b"SSH-2.0-OpenSSH\r\n\r\n",                                # not HTTP
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",        # cut short
    b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}",         # not a length
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",               # cut inside the head
])
def test_a_broken_answer_is_an_http_error(raw: bytes) -> None:
    with pytest.raises(http.client.HTTPException):
        _read_response(io.BytesIO(raw), "GET")

"""What an API failure means is decided in one place: kube.classify. How requests go: credentials
read once a second, a Retry-After honoured (against a real local server), watches read line by
line. The wire itself is tests/unit/test_transport.py's."""

from __future__ import annotations

import http.server
import json
import logging
import os
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from configmirror.client.kube import (
    AUTH_REFRESH,
    CONNECT_TIMEOUT,
    NAMESPACES,
    REQUEST_TIMEOUT,
    RETRY_AFTER_ATTEMPTS,
    RETRY_AFTER_MAX,
    ApiError,
    ConfigError,
    Failure,
    Kube,
    classify,
    load_configuration,
    resource_of,
)
from configmirror.clock import FakeClock
from configmirror.vocabulary import CONFIGMAPS, EVENTS, SECRETS
from configmirror_testing.certs import make_pki
from configmirror_testing.localserver import LocalServer, RawServer, no_unclosed_sockets
from configmirror_testing.wait import wait_for


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
    assert not ApiError(404, "NotFound", "being terminated", "get", "/p").namespace_terminating


def test_an_error_names_the_verb_path_status_and_message_and_keeps_retry_after() -> None:
    err = ApiError(429, "TooManyRequests", "slow down", "update", "/p", retry_after=3.0)
    assert str(err) == "update /p: 429 TooManyRequests: slow down"
    assert err.retry_after == 3.0


def test_resource_paths() -> None:
    assert CONFIGMAPS.collection() == "/api/v1/configmaps"
    assert CONFIGMAPS.collection("a") == "/api/v1/namespaces/a/configmaps"
    assert CONFIGMAPS.item("a", "b") == "/api/v1/namespaces/a/configmaps/b"
    assert resource_of(CONFIGMAPS.item("a", "b")) == "configmaps"
    assert resource_of(CONFIGMAPS.collection("a")) == "configmaps"
    assert resource_of("/api/v1/namespaces/a") == "namespaces"
    assert resource_of("/api/v1/namespaces") == "namespaces"
    # A namespace named like a resource is still a namespace.
    assert resource_of("/api/v1/namespaces/secrets") == "namespaces"
    assert resource_of("/namespaces/secrets") == "namespaces"
    assert resource_of("/api/v1/namespaces/events/configmaps") == "configmaps"


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



def test_a_token_put_in_use_is_sent_from_the_next_request_on() -> None:
    configuration = client.Configuration(host="https://127.0.0.1:1")
    configuration.api_key = {"BearerToken": "Bearer one"}  # as the kubeconfig loader sets it

    def reload(conf: client.Configuration) -> None:  # the loader's hook: the kubeconfig's token
        conf.api_key = {"BearerToken": "Bearer one"}
    configuration.refresh_api_key_hook = reload
    clock = FakeClock()
    kube = Kube(configuration, clock=clock)
    try:
        assert kube._headers(None)["authorization"] == "Bearer one"
        kube.use_token("two")  # within the refresh period: the cached header is dropped
        assert kube._headers(None)["authorization"] == "Bearer two"
        clock.step(AUTH_REFRESH)  # read again: the loader's token does not come back
        assert kube._headers(None)["authorization"] == "Bearer two"
    finally:
        kube.close()


def test_the_public_names_are_where_the_rest_of_the_code_finds_them() -> None:
    assert (SECRETS.kind, SECRETS.item("a", "b")) == ("Secret", "/api/v1/namespaces/a/secrets/b")
    assert EVENTS.collection("a") == "/api/v1/namespaces/a/events"
    assert NAMESPACES == "/api/v1/namespaces"
    assert resource_of("/apis/coordination.k8s.io/v1/namespaces/a/leases/b") == "leases"
    assert resource_of("/version") == "version" and resource_of("/") == ""


# -- requests against a real local server, answering as a script says ---------------------------


class Scripted:
    """A local HTTP/1.1 server that answers request i with answers[i] (status, headers, body);
    past the script, 201 `{}`. Records every request: (method, path, headers, body)."""

    def __init__(self, answers: list[tuple[int, dict[str, str], bytes]]) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.answer()

            def do_PUT(self) -> None:
                self.answer()

            def answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.seen.append((self.command, self.path,
                                      {k.lower(): v for k, v in self.headers.items()}, body))
                    status, headers, data = (outer.answers.pop(0) if outer.answers
                                             else (201, {}, b"{}"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.local = LocalServer(Handler)
        self.url = self.local.url

    def requests(self) -> int:
        with self.lock:
            return len(self.seen)

    def stop(self) -> None:
        self.local.stop()


STATUS = json.dumps({"kind": "Status", "reason": "TooManyRequests",
                     "message": "too many requests, please try again later"}).encode()


def throttled(retry_after: str | None, status: int = 429) -> tuple[int, dict[str, str], bytes]:
    return status, ({"Retry-After": retry_after} if retry_after is not None else {}), STATUS


@pytest.fixture
def scripted() -> Iterator[list[Scripted]]:
    made: list[Scripted] = []
    yield made
    for server in made:
        server.stop()


def serve(made: list[Scripted], *answers: tuple[int, dict[str, str], bytes]) -> Scripted:
    server = Scripted(list(answers))
    made.append(server)
    return server


def create(kube: Kube) -> dict[str, Any]:
    return kube.request("create", CONFIGMAPS.collection("a"), body={"data": {"k": "v"}})


def in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as err:
            outcome.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_is_waited_out_and_the_request_sent_again(
        scripted: list[Scripted], status: int) -> None:
    server = serve(scripted, throttled("3", status))
    clock = FakeClock()
    kube = Kube(client.Configuration(host=server.url), clock=clock)
    try:
        thread, outcome = in_thread(lambda: create(kube))
        wait_for(lambda: clock.waiters() == 1, what="the wait for Retry-After")
        assert server.requests() == 1
        clock.step(2.9)
        assert clock.waiters() == 1 and server.requests() == 1, "not before 3 s"
        clock.step(0.1)
        thread.join(5)
        assert outcome == [{}], "the second answer, 201"
        assert server.requests() == 2
        first, second = server.seen
        assert first[3] == second[3] == b'{"data":{"k":"v"}}', "the same request, whole"
    finally:
        kube.close()


def test_retry_after_is_honoured_at_most_the_attempts_then_the_429_is_the_callers(
        scripted: list[Scripted]) -> None:
    server = serve(scripted, *[throttled("0")] * (RETRY_AFTER_ATTEMPTS + 1))
    kube = Kube(client.Configuration(host=server.url))
    try:
        with pytest.raises(ApiError) as raised:
            create(kube)
    finally:
        kube.close()
    assert server.requests() == RETRY_AFTER_ATTEMPTS
    assert (raised.value.status, raised.value.retry_after) == (429, 0.0)
    assert raised.value.message == "too many requests, please try again later"
    assert kube.counts() == {("create", "configmaps", 429): RETRY_AFTER_ATTEMPTS}


def test_a_retry_after_longer_than_the_max_is_not_waited_here(
        scripted: list[Scripted]) -> None:
    server = serve(scripted, throttled(str(int(RETRY_AFTER_MAX) + 1)))
    kube = Kube(client.Configuration(host=server.url), clock=FakeClock())
    try:
        with pytest.raises(ApiError) as raised:
            create(kube)
    finally:
        kube.close()
    assert server.requests() == 1
    assert raised.value.retry_after == RETRY_AFTER_MAX + 1, "for the caller to wait"


def test_a_retry_after_of_exactly_the_max_is_waited_here(scripted: list[Scripted]) -> None:
    server = serve(scripted, throttled(str(int(RETRY_AFTER_MAX))))
    clock = FakeClock()
    kube = Kube(client.Configuration(host=server.url), clock=clock)
    try:
        thread, outcome = in_thread(lambda: create(kube))
        wait_for(lambda: clock.waiters() == 1, what="the wait for Retry-After")
        clock.step(RETRY_AFTER_MAX)
        thread.join(5)
        assert outcome == [{}] and server.requests() == 2
    finally:
        kube.close()


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_a_4xx_is_never_sent_again_whatever_its_retry_after(
        scripted: list[Scripted], status: int) -> None:
    server = serve(scripted, throttled("0", status))
    kube = Kube(client.Configuration(host=server.url))
    try:
        with pytest.raises(ApiError) as raised:
            create(kube)
    finally:
        kube.close()
    assert server.requests() == 1 and raised.value.status == status


@pytest.mark.parametrize("header", [None, "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_a_429_without_a_retry_after_in_seconds_is_the_callers(
        scripted: list[Scripted], header: str | None) -> None:
    server = serve(scripted, throttled(header))
    kube = Kube(client.Configuration(host=server.url))
    try:
        with pytest.raises(ApiError) as raised:
            create(kube)
    finally:
        kube.close()
    assert server.requests() == 1 and raised.value.retry_after is None


def test_a_negative_retry_after_means_at_once(scripted: list[Scripted]) -> None:
    server = serve(scripted, throttled("-5"))
    kube = Kube(client.Configuration(host=server.url), clock=FakeClock())
    try:
        assert create(kube) == {}
    finally:
        kube.close()
    assert server.requests() == 2


def test_close_ends_a_retry_after_wait_at_once(scripted: list[Scripted]) -> None:
    server = serve(scripted, throttled("5"))
    clock = FakeClock()
    kube = Kube(client.Configuration(host=server.url), clock=clock)
    thread, outcome = in_thread(lambda: create(kube))
    wait_for(lambda: clock.waiters() == 1, what="the wait for Retry-After")
    kube.close()
    thread.join(5)
    assert not thread.is_alive()
    assert isinstance(outcome[0], ApiError) and outcome[0].status == 429
    assert server.requests() == 1


def test_the_client_side_limit_spaces_requests_by_the_clock(scripted: list[Scripted]) -> None:
    server = serve(scripted)
    clock = FakeClock()
    kube = Kube(client.Configuration(host=server.url), qps=1, burst=1, clock=clock)
    try:
        assert create(kube) == {}, "the burst: at once"
        thread, outcome = in_thread(lambda: create(kube))
        wait_for(lambda: clock.waiters() == 1, what="the wait for a turn")
        clock.step(0.9)
        assert server.requests() == 1, "not before 1/qps"
        clock.step(0.1)
        thread.join(5)
        assert outcome == [{}] and server.requests() == 2
    finally:
        kube.close()


def test_a_request_carries_the_headers_the_server_needs(scripted: list[Scripted]) -> None:
    server = serve(scripted, (200, {}, b"{}"), (200, {}, b"{}"))
    configuration = client.Configuration(host=server.url)
    configuration.api_key = {"BearerToken": "tok"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    kube = Kube(configuration, user_agent="configmirror/test")
    try:
        kube.request("get", "/api/v1/namespaces", {"limit": 5, "continue": None,
                                                   "labelSelector": "a=b,c"})
        kube.request("update", "/x", body={"a": 1}, content_type="application/merge-patch+json")
    finally:
        kube.close()
    (get_method, path, get_headers, _), (put_method, _, put_headers, body) = server.seen
    assert (get_method, path) == ("GET", "/api/v1/namespaces?limit=5&labelSelector=a%3Db%2Cc")
    assert get_headers["authorization"] == "Bearer tok"
    assert get_headers["user-agent"] == "configmirror/test"
    assert get_headers["accept"] == "application/json"
    assert "content-type" not in get_headers, "no body, no content type"
    assert (put_method, body) == ("PUT", b'{"a":1}')
    assert put_headers["content-type"] == "application/merge-patch+json"


@pytest.mark.parametrize(("data", "decoded"), [
    (b"", {}),
    (b"[1, 2]", {"items": [1, 2]}),
    (b'{"kind": "ConfigMap"}', {"kind": "ConfigMap"}),
])
def test_an_answer_is_decoded_to_one_dict(scripted: list[Scripted], data: bytes,
                                          decoded: dict[str, Any]) -> None:
    server = serve(scripted, (200, {}, data))
    kube = Kube(client.Configuration(host=server.url))
    try:
        assert kube.request("get", "/x") == decoded
    finally:
        kube.close()


def test_an_error_that_is_not_json_keeps_the_start_of_its_text(
        scripted: list[Scripted]) -> None:
    server = serve(scripted, (500, {}, b"upstream connect error " + b"x" * 500))
    kube = Kube(client.Configuration(host=server.url))
    try:
        with pytest.raises(ApiError) as raised:
            kube.request("get", "/x")
    finally:
        kube.close()
    assert raised.value.message.startswith("upstream connect error")
    assert len(raised.value.message) == 200
    assert raised.value.reason == "Internal Server Error"


def test_requests_are_counted_by_verb_resource_and_status(scripted: list[Scripted]) -> None:
    server = serve(scripted, (404, {}, b"{}"))
    kube = Kube(client.Configuration(host=server.url))
    try:
        with pytest.raises(ApiError):
            kube.request("get", CONFIGMAPS.item("a", "b"))
        create(kube)
        create(kube)
    finally:
        kube.close()
    assert kube.counts() == {("get", "configmaps", 404): 1, ("create", "configmaps", 201): 2}
    assert kube.total({"create"}) == 2 and kube.total({"get", "create"}, "configmaps") == 3
    assert kube.total({"create"}, "secrets") == 0


def test_no_answer_is_an_api_error_with_status_0_and_counted() -> None:
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
    assert raised.value.reason == "ConnectionError"
    assert kube.counts() == {("create", "configmaps", 0): 1}


def test_a_setting_the_wire_cannot_honour_is_a_config_error_naming_it() -> None:
    configuration = client.Configuration(host="https://127.0.0.1:1")
    configuration.proxy = "socks5://127.0.0.1:1080"
    with pytest.raises(ConfigError, match=r"cluster https://127\.0\.0\.1:1: proxy: "):
        Kube(configuration)


# -- watches ------------------------------------------------------------------------------------


class Watching:
    """A local server answering a watch with the chunks in `chunks` (then the end), or an
    error status."""

    def __init__(self, chunks: list[bytes], status: int = 200,
                 headers: dict[str, str] | None = None, answer: bool = True) -> None:
        self.paths: list[str] = []
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.paths.append(self.path)
                if not answer:
                    outer.release.wait(10)
                    self.close_connection = True
                    return
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if status >= 400:
                    body = STATUS
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                if outer.release.wait(10):  # the silent test's server sends nothing more
                    self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.local = LocalServer(Handler)
        self.kube = Kube(client.Configuration(host=self.local.url))

    def stop(self) -> None:
        self.release.set()
        self.kube.close()
        self.local.stop()


def test_a_watch_yields_one_event_per_line_across_chunks() -> None:
    server = Watching([b'{"type": "ADDED", "n": 0}\n',  # one event, one chunk: the usual
                       b'{"type": "ADDED", "n": 1}\n{"type"', b': "MODIFIED", "n": 2}\n\n',
                       b'{"type": "DELETED", "n": 3}'])
    server.release.set()
    try:
        stream = server.kube.watch("/api/v1/configmaps", {"resourceVersion": "7"}, 5)
        events = list(stream)
        stream.close()
    finally:
        server.stop()
    assert [e["n"] for e in events] == [0, 1, 2, 3]
    assert server.paths == ["/api/v1/configmaps?resourceVersion=7&watch=true"]
    assert server.kube.counts() == {("watch", "configmaps", 200): 1}


def test_closing_a_watch_closes_its_socket() -> None:
    server = Watching([b'{"type": "ADDED"}\n'])
    try:
        before = open_fds()
        stream = server.kube.watch("/api/v1/configmaps", {}, 5)
        assert stream.next_event(5) == {"type": "ADDED"}
        stream.close()
        server.release.set()  # the server's side of it ends too (a socket of this process)
        wait_for(lambda: open_fds() == before, what="the watch's socket closed")
    finally:
        server.stop()


def test_a_watch_whose_server_sends_no_head_gives_up_at_its_read_timeout() -> None:
    server = Watching([], status=200, headers={}, answer=False)
    try:
        with no_unclosed_sockets():
            thread, outcome = in_thread(
                lambda: server.kube.watch("/api/v1/configmaps", {}, 0.2))
            thread.join(5)
        assert not thread.is_alive(), "0.2 s, not the 30 s of a request"
        assert isinstance(outcome[0], ApiError) and outcome[0].status == 0
    finally:
        server.stop()


def test_a_watch_waits_its_turn_under_the_client_side_limit() -> None:
    server = Watching([b'{"type": "ADDED"}\n'])
    clock = FakeClock()
    kube = Kube(client.Configuration(host=server.local.url), qps=1, burst=1, clock=clock)
    try:
        thread, outcome = in_thread(lambda: (kube.watch("/a", {}, 5), kube.watch("/b", {}, 5)))
        wait_for(lambda: clock.waiters() == 1, what="the second watch to wait its turn")
        assert server.paths == ["/a?watch=true"]
        clock.step(1.0)
        thread.join(5)
        assert server.paths == ["/a?watch=true", "/b?watch=true"]
        for stream in outcome[0]:
            stream.close()
    finally:
        kube.close()
        server.stop()


@pytest.mark.parametrize("status", [400, 429])
def test_a_watch_refused_is_an_api_error_with_the_servers_reason_and_its_socket_closed(
        status: int) -> None:
    server = Watching([], status=status, headers={"Retry-After": "2"})
    try:
        before = open_fds()
        with pytest.raises(ApiError) as raised:
            server.kube.watch("/api/v1/configmaps", {}, 5)
        wait_for(lambda: open_fds() == before, what="the refused watch's socket closed")
    finally:
        server.stop()
    assert (raised.value.status, raised.value.reason, raised.value.retry_after) == \
        (status, "TooManyRequests", 2.0)
    assert raised.value.verb == "watch"


def test_a_watch_that_goes_silent_is_an_api_error_after_its_read_timeout() -> None:
    server = Watching([b'{"type": "ADDED"}\n'])
    try:
        stream = server.kube.watch("/api/v1/configmaps", {}, 0.2)
        events = iter(stream)
        assert next(events) == {"type": "ADDED"}
        with pytest.raises(ApiError) as raised:
            next(events)
        stream.close()
    finally:
        server.stop()
    assert raised.value.status == 0 and raised.value.path == "/api/v1/configmaps"


def test_no_answer_to_a_watch_is_an_api_error_with_status_0() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = Kube(client.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(ApiError) as raised:
            kube.watch("/api/v1/configmaps", {}, 5)
    finally:
        kube.close()
    assert raised.value.status == 0
    assert kube.counts() == {("watch", "configmaps", 0): 1}


# -- configuration ------------------------------------------------------------------------------


def write_kubeconfig(path: Path, contexts: dict[str, str], current: str | None = "one",
                     user: dict[str, Any] | None = None) -> str:
    """A kubeconfig with one cluster per context (context name -> server)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        **({"current-context": current} if current else {}),
        "clusters": [{"name": f"c-{n}", "cluster": {"server": s}} for n, s in contexts.items()],
        "users": [{"name": "u", "user": user or {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": f"c-{n}", "user": "u"}}
                     for n in contexts]}))
    return str(path)


def test_the_context_named_is_the_one_loaded(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "k", {"one": "https://127.0.0.1:1",
                                               "two": "http://127.0.0.1:2"})
    assert load_configuration(config).host == "https://127.0.0.1:1"
    loaded = load_configuration(config, "two", pool_size=7)
    assert (loaded.host, loaded.connection_pool_maxsize) == ("http://127.0.0.1:2", 7)


def test_an_unknown_context_is_refused_naming_it(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "k", {"one": "https://127.0.0.1:1"})
    with pytest.raises(ConfigError, match=f"from {config} \\(context nope\\): .*nope"):
        load_configuration(config, "nope")


def test_no_current_context_and_none_named_is_refused(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "k", {"one": "https://127.0.0.1:1"}, current=None)
    with pytest.raises(ConfigError, match="no context given and no current-context"):
        load_configuration(config)


def test_a_missing_kubeconfig_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"cannot load cluster configuration from "
                                          f"{tmp_path / 'nope'}"):
        load_configuration(str(tmp_path / "nope"))


def test_an_exec_plugin_that_gives_no_credential_is_refused(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "k", {"one": "https://127.0.0.1:1"}, user={
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "false"}})
    with pytest.raises(ConfigError, match="user u: the exec plugin gave no credential"):
        load_configuration(config)


def test_in_a_pod_without_its_files_the_in_cluster_load_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="cannot load the in-cluster configuration"):
        load_configuration()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_limits_are_the_documented_ones() -> None:
    """Changing one is a decision: the README, docs/architecture.md and kube.py say why
    they are what they are."""
    assert (REQUEST_TIMEOUT, CONNECT_TIMEOUT) == (30.0, 10.0)
    assert (RETRY_AFTER_ATTEMPTS, RETRY_AFTER_MAX, AUTH_REFRESH) == (3, 10.0, 1.0)


def test_the_client_side_limit_lets_a_burst_through_at_once(scripted: list[Scripted]) -> None:
    server = serve(scripted)
    clock = FakeClock()
    kube = Kube(client.Configuration(host=server.url), qps=1, burst=2, clock=clock)
    try:
        assert create(kube) == {} and create(kube) == {}, "the burst of 2, at once"
        thread, outcome = in_thread(lambda: create(kube))
        wait_for(lambda: clock.waiters() == 1, what="the third to wait its turn")
        clock.step(0.9)
        assert server.requests() == 2
        clock.step(0.1)
        thread.join(5)
        assert outcome == [{}] and server.requests() == 3
    finally:
        kube.close()


def test_close_closes_the_idle_connections(scripted: list[Scripted]) -> None:
    server = serve(scripted)
    kube = Kube(client.Configuration(host=server.url))
    create(kube)
    before = open_fds()
    kube.close()
    wait_for(lambda: open_fds() < before, what="the idle connection closed")


def test_no_answer_says_what_the_system_said(scripted: list[Scripted]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = Kube(client.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        for call in (lambda: create(kube), lambda: kube.watch("/api/v1/configmaps", {}, 5)):
            with pytest.raises(ApiError) as raised:
                call()
            assert "Connection refused" in raised.value.message
    finally:
        kube.close()


def test_a_watch_broken_mid_stream_says_what_broke_it() -> None:
    class Broken(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            self.request.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"5\r\nxx")  # a chunk cut short, then the end

    with RawServer(Broken) as server:
        kube = Kube(client.Configuration(host=f"http://127.0.0.1:{server.port}"))
        try:
            stream = kube.watch("/api/v1/configmaps", {}, 5)
            with pytest.raises(ApiError) as raised:
                stream.next_event(5)
            stream.close()
        finally:
            kube.close()
    assert raised.value.status == 0 and "3 more expected" in raised.value.message


def test_an_exec_plugin_that_gives_a_token_is_used(tmp_path: Path) -> None:
    plugin = tmp_path / "credential"
    plugin.write_text("#!/bin/sh\necho '" + json.dumps({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
        "status": {"token": "from-exec"}}) + "'\n")
    plugin.chmod(0o755)
    config = write_kubeconfig(tmp_path / "k", {"one": "http://127.0.0.1:1"}, user={
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                 "interactiveMode": "Never"}})
    loaded = load_configuration(config)
    assert loaded.api_key["BearerToken"] == "Bearer from-exec"


def test_a_user_with_no_credentials_loads(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "k", {"one": "http://127.0.0.1:1"}, user={"a": 1})
    assert load_configuration(config).host == "http://127.0.0.1:1"


def test_a_plain_http_server_logs_no_tls_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = write_kubeconfig(tmp_path / "k", {"one": "http://127.0.0.1:1"})
    with caplog.at_level(logging.WARNING):
        load_configuration(config)
    assert caplog.records == []


def test_a_proxy_from_the_environment_that_cannot_be_used_is_named_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_kubeconfig(tmp_path / "k", {"one": "https://127.0.0.1:1"})
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(ConfigError, match=r"the proxy from the environment \(HTTPS_PROXY"):
        load_configuration(config)


def test_a_kubeconfig_given_wins_over_the_pods_own_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = write_kubeconfig(tmp_path / "k", {"one": "http://127.0.0.1:1"})
    assert load_configuration(config).host == "http://127.0.0.1:1"


# -- where the configuration comes from: --kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No $KUBECONFIG, not in a pod, and a home of our own (no ~/.kube/config yet)."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


def in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A pod's environment and service account files; returns the server they name."""
    from kubernetes.config import incluster_config

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_bytes(make_pki(tmp_path / "pki").ca.read_bytes())
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return "https://10.0.0.1:443"


def test_the_kubeconfig_given_wins_over_kubeconfig_listed(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = write_kubeconfig(tmp_path / "given", {"one": "http://127.0.0.1:1"})
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "env", {"one": "http://127.0.0.1:2"}))
    assert load_configuration(given).host == "http://127.0.0.1:1"


def test_kubeconfig_listed_wins_over_the_pods_own_configuration(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_a_pod(tmp_path, monkeypatch)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "env", {"one": "http://127.0.0.1:2"}))
    assert load_configuration().host == "http://127.0.0.1:2"


def test_in_a_pod_the_pods_own_configuration_wins_over_the_home_kubeconfig(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = in_a_pod(tmp_path, monkeypatch)
    write_kubeconfig(nowhere / ".kube" / "config", {"one": "http://127.0.0.1:3"})
    loaded = load_configuration()
    assert (loaded.host, loaded.api_key) == (server, {"BearerToken": "bearer pod-token"})


def test_a_context_named_in_a_pod_is_the_home_kubeconfigs(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_a_pod(tmp_path, monkeypatch)
    write_kubeconfig(nowhere / ".kube" / "config", {"one": "http://127.0.0.1:3",
                                                    "two": "http://127.0.0.1:4"})
    assert load_configuration(context="two").host == "http://127.0.0.1:4"


def test_outside_a_pod_the_home_kubeconfig_is_read(nowhere: Path) -> None:
    write_kubeconfig(nowhere / ".kube" / "config", {"one": "http://127.0.0.1:3"})
    assert load_configuration().host == "http://127.0.0.1:3"


def test_no_configuration_anywhere_says_where_it_looked(nowhere: Path) -> None:
    with pytest.raises(ConfigError, match=r"from ~/.kube/config: no such file \(and no "
                                          r"--kubeconfig, no \$KUBECONFIG, not in a pod\)"):
        load_configuration()


def test_kubeconfig_files_are_merged_the_first_to_name_a_thing_wins(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_kubeconfig(tmp_path / "first", {"one": "http://127.0.0.1:1"}, current=None)
    second = write_kubeconfig(tmp_path / "second", {"one": "http://127.0.0.1:2",
                                                    "two": "http://127.0.0.1:3"}, current="two")
    third = write_kubeconfig(tmp_path / "third", {"one": "http://127.0.0.1:4"}, current="one")
    missing = str(tmp_path / "missing")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([missing, first, second, third]))
    # current-context: the first file that sets it (the second; the official merger takes
    # the last); a context or cluster named twice: the first file's.
    assert load_configuration().host == "http://127.0.0.1:3"
    assert load_configuration(context="one").host == "http://127.0.0.1:1"


def test_a_context_of_a_later_kubeconfig_file_is_found(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_kubeconfig(tmp_path / "first", {"one": "http://127.0.0.1:1"})
    second = write_kubeconfig(tmp_path / "second", {"two": "http://127.0.0.1:2"})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([first, second]))
    assert load_configuration(context="two").host == "http://127.0.0.1:2"


def test_kubeconfig_listing_no_file_that_exists_is_refused_naming_it(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_a_pod(tmp_path, monkeypatch)  # no falling back to another cluster than the one asked
    listed = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    monkeypatch.setenv("KUBECONFIG", listed)
    with pytest.raises(ConfigError, match=f"from \\$KUBECONFIG \\({listed}\\): none of its "
                                          "files exists"):
        load_configuration()


def test_a_context_not_in_the_listed_files_is_refused_naming_it_and_theirs(
        nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_kubeconfig(tmp_path / "first", {"one": "http://127.0.0.1:1"})
    second = write_kubeconfig(tmp_path / "second", {"two": "http://127.0.0.1:2"})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([first, second]))
    with pytest.raises(ConfigError, match=r"context 'nope' is not in \$KUBECONFIG .*"
                                          r"\(its contexts: one, two\)"):
        load_configuration(context="nope")


def test_a_blank_line_between_events_is_skipped_without_waiting_for_more() -> None:
    server = Watching([b'{"n": 1}\n\n{"n": 2}\n'])
    try:
        stream = server.kube.watch("/api/v1/configmaps", {}, 5)
        # The server holds the stream open after its chunk: the second event must come from
        # what is buffered, not from a read that waits for more.
        assert [stream.next_event(1) for _ in range(2)] == [{"n": 1}, {"n": 2}]
        stream.close()
    finally:
        server.stop()

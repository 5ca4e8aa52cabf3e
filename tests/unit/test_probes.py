"""The probes/metrics server as HTTP clients and the manager see it: its answers, and a stop
that ends its thread, closes its port, and waits for no client."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter

from configmirror.operator.probes import Probes
from configmirror_testing.wait import wait_for


@pytest.fixture
def probes() -> Iterator[Probes]:
    registry = CollectorRegistry()
    Counter("probes_test", "a counter", registry=registry).inc()
    served = Probes("127.0.0.1:0", "127.0.0.1:0", lambda: True, lambda: True, registry)
    served.start()
    yield served
    served.stop(5)


def answer(address: str, path: str) -> http.client.HTTPResponse:
    host, _, port = address.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    connection.request("GET", path)
    return connection.getresponse()


def test_an_answer_says_its_type_and_length(probes: Probes) -> None:
    got = answer(probes.addresses[0], "/metrics")
    body = got.read()
    assert got.status == 200 and b"probes_test_total 1.0" in body
    assert got.getheader("Content-Type") == CONTENT_TYPE_LATEST
    assert got.getheader("Content-Length") == str(len(body))


def test_a_query_string_leaves_the_route_as_it_is(probes: Probes) -> None:
    got = answer(probes.addresses[0], "/healthz?verbose=1")
    assert (got.status, got.read()) == (200, b"ok")


def test_a_path_no_route_serves_is_not_found(probes: Probes) -> None:
    got = answer(probes.addresses[0], "/debug")
    assert (got.status, got.read(), got.getheader("Content-Type")) == (
        404, b"not found", "text/plain")


def test_a_host_left_out_serves_every_interface() -> None:
    served = Probes(":0", "0", lambda: True, lambda: True, CollectorRegistry())
    served.start()
    try:
        (address,) = served.addresses
        assert address.startswith("0.0.0.0:")
        assert answer("127.0.0.1:" + address.rpartition(":")[2], "/readyz").status == 200
    finally:
        assert served.stop(5)


def test_a_stopped_server_refuses_connections(probes: Probes) -> None:
    host, _, port = probes.addresses[0].rpartition(":")
    assert probes.stop(5)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2).close()


def test_stop_with_no_time_to_wait_says_the_thread_has_not_ended_yet(probes: Probes) -> None:
    assert not probes.stop(0), "its thread sees the stop only within its poll"
    assert probes.stop(5)


def test_a_client_that_sends_nothing_does_not_hold_up_stop(probes: Probes) -> None:
    host, _, port = probes.addresses[0].rpartition(":")
    silent = socket.create_connection((host, int(port)), timeout=5)
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(probes.stop(2)))
    try:
        wait_for(lambda: any("process_request" in t.name for t in threading.enumerate()),
                 what="the server to take the connection on a request thread")
        begun = time.monotonic()
        stopper.start()
        stopper.join(4)
        assert stopped == [True] and time.monotonic() - begun < 3
    finally:
        silent.close()
        stopper.join(5)

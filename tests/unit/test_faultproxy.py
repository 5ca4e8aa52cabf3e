"""The fault proxy the network-fault tests use (configmirror_testing.faultproxy), checked
against a real echo server on loopback: each fault does what its name says, and only that."""

from __future__ import annotations

import socket
import socketserver
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from configmirror_testing.faultproxy import FaultProxy
from configmirror_testing.localserver import RawServer
from configmirror_testing.wait import wait_for


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with RawServer(Echo) as server, FaultProxy(("127.0.0.1", server.port)) as running:
        yield running


def connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), 5)
    sock.settimeout(5)
    return sock


def echo(sock: socket.socket, data: bytes = b"ping") -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_bytes_pass_both_ways(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        assert echo(sock, b"x" * 200_000) == b"x" * 200_000
    wait_for(lambda: proxy.connections() == 0, what="the closed connection to be forgotten")


def test_a_silent_drop_silences_open_connections_for_good_and_spares_new_ones(
        proxy: FaultProxy) -> None:
    old = connect(proxy)
    try:
        assert echo(old) == b"ping"
        assert proxy.silent_drop() == 1
        old.sendall(b"lost")  # the write succeeds: the connection looks open
        old.settimeout(0.3)
        with pytest.raises(TimeoutError):
            old.recv(10)
        with connect(proxy) as new:
            assert echo(new) == b"ping", "a new connection works"
        with pytest.raises(TimeoutError):
            old.recv(10)  # and the old one stays silent
    finally:
        old.close()


def test_a_reset_sends_an_rst_to_every_open_connection(proxy: FaultProxy) -> None:
    socks = [connect(proxy) for _ in range(3)]
    try:
        for sock in socks:
            assert echo(sock) == b"ping"
        assert proxy.reset() == 3
        for sock in socks:
            with pytest.raises(ConnectionResetError):
                sock.recv(10)
        with connect(proxy) as new:
            assert echo(new) == b"ping"
    finally:
        for sock in socks:
            sock.close()


def test_latency_is_added_each_way(proxy: FaultProxy) -> None:
    proxy.latency(0.15)
    with connect(proxy) as sock:
        started = time.monotonic()
        assert echo(sock) == b"ping"
        assert time.monotonic() - started >= 0.3, "0.15 s there and 0.15 s back"
    proxy.heal()
    with connect(proxy) as sock:
        assert echo(sock) == b"ping"


def test_bandwidth_caps_the_bytes_per_second(proxy: FaultProxy) -> None:
    proxy.bandwidth(200_000)
    with connect(proxy) as sock:
        started = time.monotonic()
        assert echo(sock, b"y" * 100_000) == b"y" * 100_000
        # 100 kB there and back at 200 kB/s: at least 0.5 s (less the first chunk each way)
        assert time.monotonic() - started >= 0.3


def test_new_connections_can_be_accepted_and_never_answered(proxy: FaultProxy) -> None:
    proxy.answer_new(False)
    with connect(proxy) as sock:  # the TCP handshake completes
        sock.sendall(b"hello")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(10)
    proxy.answer_new(True)
    with connect(proxy) as sock:
        assert echo(sock) == b"ping"


def test_it_forwards_to_this_machine_only() -> None:
    with pytest.raises(ValueError, match="this machine only"):
        FaultProxy(("10.0.0.1", 443))


class Received(socketserver.BaseRequestHandler):
    """Records what reaches it, and answers each chunk with "ok"."""

    got: ClassVar[list[bytes]] = []

    def handle(self) -> None:
        while data := self.request.recv(65536):
            Received.got.append(data)
            self.request.sendall(b"ok")


def test_dropped_answers_let_requests_reach_the_server_on_open_and_new_connections() -> None:
    Received.got = []
    with RawServer(Received) as server, FaultProxy(("127.0.0.1", server.port)) as proxy:
        old = connect(proxy)
        try:
            assert echo(old, b"hi") == b"ok"
            proxy.drop_answers(True)
            old.sendall(b"applied")
            with connect(proxy) as new:
                new.sendall(b"also")
                wait_for(lambda: b"applied" in Received.got and b"also" in Received.got,
                         what="both requests to reach the server")
                new.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    new.recv(10)  # its answer is lost
            old.settimeout(0.3)
            with pytest.raises(TimeoutError):
                old.recv(10)
            proxy.heal()
            old.settimeout(5)
            assert echo(old, b"ag") == b"ok", "answers pass again; the lost stay lost"
        finally:
            old.close()

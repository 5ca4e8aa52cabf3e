"""The wire to the API server (configmirror.client.transport): HTTP/1.1 framing read off real
sockets, keep-alive connections against a real local server, streams, and TLS and proxies as
every kubeconfig form gives them, against a real TLS server with certificates made here."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import logging
import os
import select
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from configmirror.client import transport
from configmirror.client.kube import ApiError, ConfigError, Kube, load_configuration
from configmirror.client.transport import (
    CONNECT_TIMEOUT,
    MAX_HEADERS,
    MAX_LINE,
    Connections,
    Response,
    Stream,
    UnsupportedSetting,
    _Connection,
    _Reader,
    endpoint,
)
from configmirror_testing.certs import CLIENT_NAME, SERVER_NAME, Pki, make_pki
from configmirror_testing.localserver import LocalServer, RawServer, no_unclosed_sockets
from configmirror_testing.sockets import Pieces
from configmirror_testing.wait import wait_for

# -- framing: an answer's bytes, written by hand to one end of a socket pair ---------------------


def bytewise(raw: bytes) -> Pieces:
    return Pieces(*(raw[i:i + 1] for i in range(len(raw))))


DELIVERIES = ["socket", "whole", "bytewise"]


def answer(raw: bytes, method: str = "GET", delivery: str = "socket",
           pieces: Pieces | None = None) -> tuple[Any, bool, bytes]:
    """(the response, whether the connection may be reused, the bytes left unread) of `raw`
    sent by a peer that then closes its side: through a socket pair, or from `pieces`
    (default: by `delivery`, "whole" in one receive or "bytewise" a byte per receive)."""
    if pieces is None and delivery != "socket":
        pieces = Pieces(raw) if delivery == "whole" else bytewise(raw)
    if pieces is not None:
        reader = _Reader(pieces)  # type: ignore[arg-type]
        response, keep_alive = reader.response(method)
        return response, keep_alive, reader.to_end()
    ours, theirs = socket.socketpair()
    ours.settimeout(5)

    def send() -> None:
        theirs.sendall(raw)
        theirs.shutdown(socket.SHUT_WR)

    writer = threading.Thread(target=send)
    writer.start()
    try:
        reader = _Reader(ours)
        response, keep_alive = reader.response(method)
        rest = reader.to_end()
    finally:
        writer.join(5)
        ours.close()
        theirs.close()
    return response, keep_alive, rest


@pytest.mark.parametrize(("raw", "body", "reusable"), [
    (b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", b"{}", True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\n{\"a\r\n4;ext=1\r\n\": 1\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n", b'{"a": 1}', True),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"", True),
    (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
     b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", b"x", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", b"{}", False),
    (b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n", b"",
     False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", b"{}", False),
    (b"HTTP/1.1 200 OK\r\n\r\n{\"until\": \"the end\"}", b'{"until": "the end"}', False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\n" + b"z" * 26
     + b"\r\n0\r\n\r\n", b"z" * 26, True),                                  # hex sizes
    (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello, world", b"hello, world", True),
    (b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}", b"{}", True),           # bare LF lines
    (b"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\n{}", b"{}", True),       # and mixed
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2 \r\nab\r\n01;x=y\r\nc\r\n0\r\n\r\n", b"abc", True),       # blanks after a size
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\ncontent-length: 2\r\n\r\n{}", b"{}",
     True),                                                              # one length, repeated
    (b"HTTP/1.1 200 OK\r\nConnection: x-close\r\nConnection: keep-alive\r\n"
     b"Content-Length: 0\r\n\r\n", b"", True),                          # close is a token
    (b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: \t close\r\n"
     b"Content-Length: 0\r\n\r\n", b"", False),                         # in any of them
    (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 1\r\n\r\nx", b"x", True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n"
     b"1\r\nx\r\n0\r\n\r\n", b"x", True),                                # chunked wins
    (b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", b"", True),  # 204: no body
    (b"HTTP/1.1 304 Not Modified\r\n\r\n", b"", True),
    (b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", b"", True),         # no reason phrase
    (b"HTTP/1.1 200 OK\r\nX: 1\r\nContent-Length: 1\r\n\r\nx", b"x", True),  # a 1-byte name
    (b"HTTP/1.1 200 OK\r\nContent-Length:1\r\n\r\nx", b"x", True),       # no blank after ":"
    (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\tfolded: x\r\nContent-Length: 1\r\n\r\nx", b"x", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"0" * 19 + b"2\r\n\r\n{}", b"{}",
     True),                                                              # 20 digits: h11's most
])
@pytest.mark.parametrize("delivery", DELIVERIES)
def test_an_answer_is_framed_as_http_1_1_says(raw: bytes, body: bytes, reusable: bool,
                                             delivery: str) -> None:
    response, keep_alive, rest = answer(raw, delivery=delivery)
    assert (response.data, keep_alive, rest) == (body, reusable, b"")


def test_the_answer_to_a_head_request_has_no_body_whatever_its_length_says() -> None:
    response, keep_alive, rest = answer(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\n", method="HEAD")
    assert (response.data, keep_alive, rest) == (b"", True, b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_an_answer_keeps_its_status_reason_and_retry_after_and_leaves_the_next_unread(
        delivery: str) -> None:
    raw = (b"HTTP/1.1 429 Too Many Requests\r\nretry-after:  3 \r\nContent-Length: 2\r\n\r\n{}"
           b"HTTP/1.1 200 OK\r\n")
    response, _, rest = answer(raw, "POST", delivery)
    assert (response.status, response.reason, response.retry_after) == \
        (429, "Too Many Requests", "3")
    assert rest == b"HTTP/1.1 200 OK\r\n"


def test_a_large_body_arrives_whole() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: many receives
    response, keep_alive, _ = answer(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert response.data == body and keep_alive


@pytest.mark.parametrize("raw", [
    b"",                                                       # closed before any answer
    b"SSH-2.0-OpenSSH\r\n\r\n",                                # not HTTP
    b"HTTP/1.1 2000 OK\r\n\r\n",                               # not a 3-digit status
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",        # cut short
    b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}",         # not a length
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}",        # a negative length
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\nab\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # a chunk cut short
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",               # cut inside the head
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n 2\r\nab\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\na\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\na\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}",      # digits only
    b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n{}",     # two lengths
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 2\r\n\r\n{}",  # the last fits
    b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n{}",       # a blank before the colon
    b"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\n folded first\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n",  # checked without a body too
    b"HTTP/1.1 099 Low\r\n\r\n",                                 # no status below 100
    b"HTTP/1.1 099 Low\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",  # not a 1xx
    b"HTTP/1.1 200 OK\r\nContent-Length: " + b"0" * 20 + b"2\r\n\r\n{}",  # 21 digits
    b"HTTP/1.1 101 Switching Protocols\r\n\r\n",                 # no upgrade was asked
    b"HTTP/1.1 101 Switching Protocols\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",  # nor a 1xx
    b"HTTP/1.1 200 OK\r\n: no name\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nConnection: keep\x00alive\r\nContent-Length: 0\r\n\r\n",  # a NUL
    b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",       # a blank line first
])
@pytest.mark.parametrize("delivery", DELIVERIES)
def test_a_broken_answer_is_an_http_error(raw: bytes, delivery: str) -> None:
    with pytest.raises(http.client.HTTPException):
        answer(raw, delivery=delivery)


def test_a_field_named_as_long_as_a_read_one_is_skipped_all_the_same() -> None:
    # Names as long as Retry-After, Content-Length, Transfer-Encoding and Connection.
    response, _, _ = answer(b"HTTP/1.1 503 Busy\r\nX-Requested: 7\r\nContent-Length: 0\r\n"
                            b"X-Transfer-Enc: 1\r\nX-Content-Lengths: 2\r\nX-Connects: 3\r\n"
                            b"\r\n", delivery="whole")
    assert (response.status, response.retry_after, response.data) == (503, None, b"")


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_a_chunked_answer_without_a_trailer_leaves_the_next_answer_whole(
        delivery: str) -> None:
    following = b"HTTP/1.1 200 OK\r\n"
    _, _, rest = answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"1\r\nx\r\n0\r\n\r\n" + following, delivery=delivery)
    assert rest == following


def test_a_first_line_one_byte_past_the_limit_is_refused_before_it_ends() -> None:
    """MAX_LINE bytes of an unended line are waited on; one more is refused as too long."""
    with pytest.raises(http.client.IncompleteRead):
        _Reader(Pieces(b"H" * MAX_LINE)).head()  # type: ignore[arg-type]
    with pytest.raises(http.client.LineTooLong):
        _Reader(Pieces(b"H" * (MAX_LINE + 1))).head()  # type: ignore[arg-type]


def pieces_of(raw: bytes, size: int) -> Pieces:
    return Pieces(*(raw[i:i + size] for i in range(0, len(raw), size)))


@pytest.mark.parametrize("size", [1 << 20, 4096, 7])
def test_an_unended_head_is_refused_on_one_header_too_many_before_it_ends(size: int) -> None:
    """While a head has no blank line yet, its line breaks are counted as they arrive: a
    status line and MAX_HEADERS fields are waited on (the connection ends inside the head),
    one field more is refused at once, however the bytes are cut."""
    fields = b"HTTP/1.1 200 OK\r\n" + b"X-N: 1\r\n" * MAX_HEADERS
    with pytest.raises(http.client.IncompleteRead):
        _Reader(pieces_of(fields, size)).head()  # type: ignore[arg-type]
    with pytest.raises(http.client.HTTPException, match=f"more than {MAX_HEADERS} headers"):
        _Reader(pieces_of(fields + b"X-N: 1\r\n", size)).head()  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1 << 20, 4096])
def test_an_unended_field_is_measured_from_its_own_line_break(size: int) -> None:
    """The line limit of an unended head counts from the last line break, wherever the
    receives cut it, after an interim answer already read from the same buffer: a field of
    MAX_LINE bytes is waited on, one byte more is refused as too long."""
    before = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nX-A: 1\r\n"
    field = b"X-Long: " + b"a" * (MAX_LINE - 8)
    with pytest.raises(http.client.IncompleteRead):
        _Reader(pieces_of(before + field, size)).head()  # type: ignore[arg-type]
    with pytest.raises(http.client.LineTooLong):
        _Reader(pieces_of(before + field + b"a", size)).head()  # type: ignore[arg-type]


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_a_head_of_one_status_line_is_held_to_the_line_limit(delivery: str) -> None:
    """A head whose only line is its status line is as long as that line: MAX_LINE - 2 bytes
    (http.client's limit less the line break) are read, one byte more is refused."""
    def head(length: int) -> bytes:
        return b"HTTP/1.1 204 " + b"O" * (length - 13) + b"\r\n\r\n"

    assert answer(head(MAX_LINE - 2), delivery=delivery)[0].status == 204
    with pytest.raises(http.client.LineTooLong):
        answer(head(MAX_LINE - 1), delivery=delivery)


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_an_empty_chunk_size_line_in_a_receive_of_its_own_is_refused_as_it_is() -> None:
    """The chunk size line begins a receive of its own (the buffer was empty, so the search
    starts at its first byte): an empty one is named as empty, not read on to the next."""
    with pytest.raises(http.client.HTTPException) as caught:
        answer(CHUNKED, pieces=Pieces(CHUNKED, b"\r\n5\r\nhello\r\n0\r\n\r\n"))
    assert str(caught.value) == "not a chunk size line: b''"


def test_an_unended_chunk_size_line_is_refused_one_byte_past_the_limit() -> None:
    """MAX_LINE bytes of a chunk size line without its CRLF are waited on (the connection
    ends inside it); one more is refused as too long."""
    for size, fault in ((MAX_LINE, http.client.IncompleteRead),
                        (MAX_LINE + 1, http.client.LineTooLong)):
        with pytest.raises(fault):
            answer(CHUNKED, pieces=Pieces(CHUNKED, b"5;" + b"x" * (size - 2)))


def test_a_chunk_size_of_the_most_digits_is_read_and_one_more_is_refused() -> None:
    most = b"0" * 19 + b"1"  # _MAX_DIGITS (h11's limit too), leading zeros allowed
    response, _, _ = answer(CHUNKED + most + b"\r\nx\r\n0\r\n\r\n", delivery="whole")
    assert response.data == b"x"
    with pytest.raises(http.client.HTTPException, match="not a chunk size line"):
        answer(CHUNKED + b"0" + most + b"\r\nx\r\n0\r\n\r\n", delivery="whole")


def test_a_head_longer_than_a_line_may_be_is_read_when_each_line_is_within_it() -> None:
    """The line limit counts from the last line break: a head of 99 fields of 700 bytes,
    longer than MAX_LINE in all, arriving in receives of 64 KiB, is read."""
    fields = b"".join(b"X-Pad-%02d: %s\r\n" % (i, b"a" * 690) for i in range(99))
    raw = b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 1\r\n\r\nx"
    assert len(raw) > MAX_LINE
    response, _, _ = answer(raw, delivery="whole")
    assert response.data == b"x"


def test_a_bad_status_line_is_named_in_the_error_cut_to_100_bytes() -> None:
    line = b"HTTP/1.1 2000 " + b"x" * 200
    with pytest.raises(http.client.BadStatusLine) as caught:
        answer(line + b"\r\nContent-Length: 0\r\n\r\n", delivery="whole")
    assert str(caught.value) == repr(line[:100])


@pytest.mark.parametrize(("field", "fault"), [
    (b"Transfer-Encoding", "unsupported Transfer-Encoding"),
    (b"Content-Length", "not a Content-Length"),
])
def test_a_bad_framing_value_is_named_in_the_error_cut_to_40_bytes(field: bytes,
                                                                    fault: str) -> None:
    value = b"gzip" + b"9" * 60
    with pytest.raises(http.client.HTTPException) as caught:
        answer(b"HTTP/1.1 200 OK\r\n" + field + b": " + value + b"\r\n\r\n", delivery="whole")
    assert str(caught.value) == f"{fault}: {value[:40]!r}"


def test_a_line_that_is_no_header_field_is_named_in_the_error_cut_to_100_bytes() -> None:
    line = b"X" * 200
    with pytest.raises(http.client.HTTPException) as caught:
        answer(b"HTTP/1.1 200 OK\r\n" + line + b"\r\n\r\n", delivery="whole")
    assert str(caught.value) == f"not a header field: {line[:100]!r}"


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n"
    b"Retry-After: 1\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
])
def test_an_answer_cut_in_two_anywhere_reads_as_it_does_whole(raw: bytes) -> None:
    whole = answer(raw, delivery="whole")
    for cut in range(len(raw) + 1):
        assert answer(raw, pieces=Pieces(raw[:cut], raw[cut:])) == whole, cut


def test_an_answer_with_the_most_headers_in_one_receive_keeps_what_it_says() -> None:
    raw = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nAudit-Id: 1\r\n"
           + b"X-N: 1\r\n" * (MAX_HEADERS - 3) + b"retry-after: 2\r\n"
           b"Content-Length: 2\r\n\r\n{}")
    response, keep_alive, _ = answer(raw, delivery="whole")
    assert (response.status, response.reason, response.retry_after, response.data,
            keep_alive) == (201, "Created", "2", b"{}", True)


def test_a_header_line_longer_than_the_limit_is_refused() -> None:
    fits = b"X-Long: " + b"a" * (MAX_LINE - 10) + b"\r\n"
    assert answer(b"HTTP/1.1 200 OK\r\n" + fits + b"Content-Length: 0\r\n\r\n")[0].status == 200
    with pytest.raises(http.client.LineTooLong):  # one byte more
        answer(b"HTTP/1.1 200 OK\r\n" + fits[:-2] + b"a\r\nContent-Length: 0\r\n\r\n")


def test_a_status_line_without_an_end_is_refused_not_buffered_forever() -> None:
    with pytest.raises(http.client.LineTooLong):
        answer(b"HTTP/1.1 200 " + b"O" * (2 * MAX_LINE))


def test_more_headers_than_the_limit_are_refused() -> None:
    def head(count: int) -> bytes:
        return (b"HTTP/1.1 200 OK\r\n" + b"X-N: 1\r\n" * count
                + b"Content-Length: 0\r\n\r\n")

    for delivery in DELIVERIES:
        assert answer(head(MAX_HEADERS - 1), delivery=delivery)[0].status == 200
        with pytest.raises(http.client.HTTPException, match="headers"):
            answer(head(MAX_HEADERS), delivery=delivery)


# -- connections against a real local server -----------------------------------------------------


class Server:
    """A local plain-HTTP/1.1 server. POST answers `{}`; GET /hang sends nothing until the
    test ends, /half half a head; /stream sends a chunk per `send()`; /close answers and
    closes; /drop closes without an answer; /extra sends more than its answer."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.hang_up_next = False  # close the connection after the next answer, unannounced
        self.mute_port: int | None = None  # a GET from this client port is never answered
        self.drop_port: int | None = None  # a GET from this client port: closed, unanswered
        self.hung_up = threading.Event()
        self.released = threading.Event()  # ends every wait of the handlers
        self.chunks: list[bytes] = []
        self.chunk_ready = threading.Condition()
        self.both_in = threading.Barrier(2)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.ports.append(self.client_address[1])
                if self.path == "/together":
                    outer.both_in.wait(5)
                self.send_response(201)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                if outer.hang_up_next:
                    outer.hang_up_next = False
                    self.close_connection = True

            def do_GET(self) -> None:
                outer.ports.append(self.client_address[1])
                if self.client_address[1] == outer.mute_port:
                    outer.released.wait(10)
                    self.close_connection = True
                    return
                if self.client_address[1] == outer.drop_port:
                    self.close_connection = True
                    return
                if self.path == "/hang":
                    outer.released.wait(10)
                    self.close_connection = True
                    return
                if self.path == "/half":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    self.wfile.flush()
                    outer.released.wait(10)
                    self.close_connection = True
                    return
                if self.path == "/drop":  # hangs up without a word
                    self.close_connection = True
                    return
                if self.path == "/extra":  # an answer, and bytes nobody asked for
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk")
                    return
                if self.path == "/close":
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                while True:
                    with outer.chunk_ready:
                        outer.chunk_ready.wait_for(
                            lambda: outer.chunks or outer.released.is_set(), 10)
                        if not outer.chunks:
                            return
                        chunk = outer.chunks.pop(0)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    if not chunk:
                        return

            def log_message(self, format: str, *args: object) -> None:
                pass

        class HTTPServer(http.server.ThreadingHTTPServer):
            def shutdown_request(self, request: Any) -> None:
                super().shutdown_request(request)  # the socket is closed only here, after
                outer.hung_up.set()                # the handler's finish(): signal then

        self.local = LocalServer(Handler, server_class=HTTPServer)
        self.url = self.local.url

    def send(self, chunk: bytes) -> None:
        """The stream's next chunk (b"": its end)."""
        with self.chunk_ready:
            self.chunks.append(chunk)
            self.chunk_ready.notify_all()

    def stop(self) -> None:
        self.released.set()
        with self.chunk_ready:
            self.chunk_ready.notify_all()
        self.local.stop()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.stop()


@pytest.fixture
def connections(server: Server) -> Iterator[Connections]:
    conns = Connections(endpoint(client.Configuration(host=server.url)), maxsize=4)
    yield conns
    conns.close()


def post(conns: Connections, path: str = "/api/v1/namespaces/a/configmaps") -> Any:
    return conns.request("POST", path, b"{}", {"Content-Type": "application/json"}, 5)


def test_requests_in_turn_reuse_one_keep_alive_connection(
        server: Server, connections: Connections) -> None:
    for _ in range(5):
        assert post(connections).status == 201
    assert len(server.ports) == 5 and len(set(server.ports)) == 1
    assert connections.idle() == 1


def test_an_idle_connection_the_server_closed_is_replaced_before_use(
        server: Server, connections: Connections) -> None:
    server.hang_up_next = True
    post(connections)
    assert server.hung_up.wait(5), "the server closes the connection"
    assert post(connections).data == b"{}", "the next request goes out on a new connection"
    assert len(set(server.ports)) == 2


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_an_answer_that_says_close_is_not_reused_and_its_socket_is_closed(
        server: Server, connections: Connections) -> None:
    before = open_fds()
    with no_unclosed_sockets():
        assert connections.request("GET", "/close", None, {}, 5).data == b"{}"
    assert connections.idle() == 0
    # (the server's side of it is a socket of this process too, closed by its own thread)
    wait_for(lambda: open_fds() == before, what="the socket closed, not left to the GC")
    post(connections)
    assert len(set(server.ports)) == 2


def test_a_connection_with_bytes_left_after_its_answer_is_not_reused(
        server: Server, connections: Connections) -> None:
    before = open_fds()
    with no_unclosed_sockets():
        assert connections.request("GET", "/extra", None, {}, 5).data == b"{}"
    assert connections.idle() == 0
    wait_for(lambda: open_fds() == before, what="the socket closed")


def test_a_failed_request_closes_its_connection(
        server: Server, connections: Connections) -> None:
    post(connections)
    conn = connections._idle[-1]
    with pytest.raises(http.client.RemoteDisconnected):
        connections.request("GET", "/drop", None, {}, 5)
    assert conn.sock.fileno() == -1


def test_an_idle_connection_found_closed_is_closed_here_too(
        server: Server, connections: Connections) -> None:
    server.hang_up_next = True
    post(connections)
    assert server.hung_up.wait(5)
    conn = connections._idle[-1]
    post(connections)
    assert conn.sock.fileno() == -1


def test_a_reused_connection_gets_the_next_requests_timeout(
        server: Server, connections: Connections) -> None:
    connections.request("POST", "/a", b"{}", {}, 5)
    connections.request("POST", "/a", b"{}", {}, 7)
    assert connections._idle[-1].sock.gettimeout() == 7


def test_a_connection_that_ended_without_an_answer_keeps_the_other_idle_ones(
        server: Server, connections: Connections) -> None:
    two_idle_connections(connections)
    with pytest.raises(http.client.RemoteDisconnected):
        connections.request("GET", "/drop", None, {}, 5)
    assert connections.idle() == 1, "only a silent one says the others may be silent"


def test_closed_connections_keep_nothing_idle(
        server: Server, connections: Connections) -> None:
    post(connections)
    before = open_fds()
    connections.close()
    assert connections.idle() == 0
    wait_for(lambda: open_fds() < before, what="the idle socket closed")
    post(connections)  # still works, on a connection of its own
    assert connections.idle() == 0, "nothing is kept once closed"


def test_at_most_maxsize_idle_connections_are_kept(server: Server) -> None:
    conns = Connections(endpoint(client.Configuration(host=server.url)), maxsize=1)
    try:
        threads = [threading.Thread(target=post, args=(conns, "/together")) for _ in range(2)]
        with no_unclosed_sockets():
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
        assert len(set(server.ports)) == 2, "two requests at once: two connections"
        assert conns.idle() == 1
    finally:
        conns.close()


def two_idle_connections(conns: Connections) -> None:
    threads = [threading.Thread(target=post, args=(conns, "/together")) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert conns.idle() == 2


def test_a_request_with_no_byte_within_its_timeout_drops_every_idle_connection(
        server: Server, connections: Connections) -> None:
    two_idle_connections(connections)
    with pytest.raises(TimeoutError):
        connections.request("GET", "/hang", None, {}, 0.2)
    assert connections.idle() == 0, "the silent one closed, and the other idle one with it"
    assert post(connections).status == 201


def test_a_slow_answer_that_stops_half_way_drops_only_its_own_connection(
        server: Server, connections: Connections) -> None:
    two_idle_connections(connections)
    with pytest.raises(TimeoutError):
        connections.request("GET", "/half", None, {}, 0.2)
    assert connections.idle() == 1, "bytes came: the path works, the other one is kept"


def test_no_server_is_an_os_error() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conns = Connections(endpoint(client.Configuration(host=f"http://127.0.0.1:{port}")), 1)
    with pytest.raises(ConnectionRefusedError):
        post(conns)


def test_a_line_break_never_reaches_the_request_head(
        server: Server, connections: Connections) -> None:
    with pytest.raises(ValueError, match="line break"):
        connections.request("POST", "/a\r\nX-Evil: 1", b"{}", {}, 5)
    with pytest.raises(ValueError, match="line break"):
        connections.request("POST", "/a", b"{}", {"X-A": "1\nX-Evil: 1"}, 5)
    assert server.ports == [], "nothing was sent"


def test_every_socket_has_tcp_keepalive_and_no_delay(connections: Connections) -> None:
    post(connections)
    conn = connections._idle[0]
    assert conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
    assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


def test_a_stream_is_read_as_it_arrives_and_ends_with_its_last_chunk(
        server: Server, connections: Connections) -> None:
    stream = connections.stream("GET", "/stream", {}, 5)
    try:
        assert stream.status == 200
        server.send(b'{"a": 1}\n')
        assert stream.read(5) == b'{"a": 1}\n'
        server.send(b"second")
        assert stream.read(5) == b"second"
        server.send(b"")
        assert stream.read(5) == b""
        assert stream.read(5) == b"", "ended stays ended"
    finally:
        stream.close()


def test_a_stream_whose_head_never_comes_closes_its_socket(server: Server,
                                                          connections: Connections) -> None:
    before = open_fds()
    with no_unclosed_sockets(), pytest.raises(http.client.RemoteDisconnected):
        connections.stream("GET", "/drop", {}, 5)
    wait_for(lambda: open_fds() == before, what="the stream's socket closed, not left to the GC")


def test_a_silent_stream_times_out_and_can_be_read_on(
        server: Server, connections: Connections) -> None:
    stream = connections.stream("GET", "/stream", {}, 5)
    try:
        with pytest.raises(TimeoutError):
            stream.read(0.1)
        server.send(b"after the silence")
        assert stream.read(5) == b"after the silence"
    finally:
        stream.close()


def in_receive(thread: threading.Thread) -> bool:
    """Whether `thread` is inside _Reader.fill, which waits in the socket's receive."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "fill":
            return True
        frame = frame.f_back
    return False


def test_a_stream_silent_between_two_chunks_reads_the_next_once_it_comes(
        server: Server, connections: Connections) -> None:
    stream = connections.stream("GET", "/stream", {}, 5)
    try:
        server.send(b"first")
        assert stream.read(5) == b"first"
        with pytest.raises(TimeoutError):  # its CRLF read, the next size line not yet here
            stream.read(0.1)
        server.send(b"second")
        assert stream.read(5) == b"second"
    finally:
        stream.close()


def test_a_stream_read_to_its_end_and_closed_reads_as_ended(
        server: Server, connections: Connections) -> None:
    stream = connections.stream("GET", "/stream", {}, 5)
    server.send(b"")
    assert stream.read(5) == b""
    stream.close()
    assert stream.read(1) == b"", "its socket is not touched again"


def test_closing_a_stream_from_another_thread_ends_a_read_blocked_on_it(
        server: Server, connections: Connections) -> None:
    stream = connections.stream("GET", "/stream", {}, 5)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(stream.read(30))
        except (OSError, http.client.HTTPException) as err:
            outcome.append(err)

    reader = threading.Thread(target=read)
    reader.start()
    wait_for(lambda: in_receive(reader), what="the reader to block in its receive")
    stream.close()
    reader.join(5)
    assert not reader.is_alive(), "close() woke the read"
    stream.close()  # twice is fine


def read_to_end(stream: Stream) -> bytes:
    return stream.read_all(5)


def test_a_stream_with_reuse_goes_out_on_the_idle_connection_and_gives_it_back_at_its_end(
        server: Server, connections: Connections) -> None:
    post(connections)
    stream = connections.stream("GET", "/stream", {}, 5, reuse=2)
    server.send(b"event")
    server.send(b"")
    assert read_to_end(stream) == b"event"
    assert connections.idle() == 0, "in use until closed"
    stream.close()
    assert connections.idle() == 1, "read to its end: back in the pool"
    post(connections)
    assert len(server.ports) == 3 and len(set(server.ports)) == 1, "one connection for all three"


def test_a_stream_without_reuse_dials_its_own_connection_and_closes_it_at_its_end(
        server: Server, connections: Connections) -> None:
    post(connections)
    stream = connections.stream("GET", "/stream", {}, 5)
    server.send(b"")
    read_to_end(stream)
    sock = stream._conn.sock
    stream.close()
    assert len(set(server.ports)) == 2, "a connection of its own"
    assert connections.idle() == 1 and sock.fileno() == -1, "a watch's connection is not pooled"


def test_a_stream_closed_before_its_end_closes_its_connection(
        server: Server, connections: Connections) -> None:
    post(connections)
    stream = connections.stream("GET", "/stream", {}, 5, reuse=2)
    server.send(b"event")
    assert stream.read(5) == b"event"
    sock = stream._conn.sock
    stream.close()
    assert connections.idle() == 0, "a stream cut short is never reused"
    assert sock.fileno() == -1, "its socket is closed"


def test_a_stream_whose_reused_connection_is_silent_goes_out_on_a_new_one_and_drops_the_idle(
        server: Server, connections: Connections) -> None:
    two_idle_connections(connections)
    server.mute_port = connections._idle[-1].sock.getsockname()[1]  # the one taken next
    started = time.monotonic()
    stream = connections.stream("GET", "/stream", {}, 5, reuse=0.3)
    try:
        assert 0.3 <= time.monotonic() - started < 4, "the silent one was given `reuse` seconds"
        assert stream.status == 200
        assert connections.idle() == 0, "a silent idle connection: the others are dropped too"
        assert len(set(server.ports)) == 3, "the stream went out on a connection of its own"
    finally:
        stream.close()


def test_a_stream_whose_reused_connection_was_closed_goes_out_on_a_new_one_and_keeps_the_idle(
        server: Server, connections: Connections) -> None:
    two_idle_connections(connections)
    server.drop_port = connections._idle[-1].sock.getsockname()[1]  # the one taken next
    stream = connections.stream("GET", "/stream", {}, 5, reuse=2)
    try:
        assert stream.status == 200
        assert connections.idle() == 1, "closed, not silent: the other idle one is kept"
        assert len(set(server.ports)) == 3
    finally:
        stream.close()


def test_a_stream_framed_by_its_length_ends_there() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello, world")
        assert stream_of(ours).read_all(5) == b"hello, world"
    finally:
        theirs.close()
        ours.close()


# -- TLS and proxies, as kubeconfigs say them ----------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def json_handler(answer: Callable[[ssl.SSLSocket], dict[str, Any]]
                 ) -> type[http.server.BaseHTTPRequestHandler]:
    """A handler answering every GET with `answer(its TLS connection)` as JSON."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = json.dumps(answer(self.connection)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class TLSServer:
    """An HTTPS server answering GET with the common name of the client's certificate."""

    def __init__(self, pki: Pki, require_client_cert: bool = False) -> None:
        def client(connection: ssl.SSLSocket) -> dict[str, Any]:
            peer = connection.getpeercert()
            subject = dict(pair[0] for pair in (peer or {}).get("subject", ()))  # type: ignore[misc]
            return {"client": subject.get("commonName")}

        self.local = LocalServer(json_handler(client),
                                 tls=pki.server_context(require_client_cert))
        self.port = self.local.server.server_address[1]

    def stop(self) -> None:
        self.local.stop()


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[TLSServer]:
    running = TLSServer(pki)
    yield running
    running.stop()


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[TLSServer]:
    running = TLSServer(pki, require_client_cert=True)
    yield running
    running.stop()


def kubeconfig(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any] | None = None,
               name: str = "ctx") -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "the-cluster", "cluster": cluster}],
        "users": [{"name": "the-user", "user": user or {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": "the-cluster",
                                                "user": "the-user"}}]}))
    return str(path)


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def get(config: str) -> dict[str, Any]:
    kube = Kube(load_configuration(config))
    try:
        return kube.request("get", "/version")
    finally:
        kube.close()


def test_tls_verifies_the_server_against_the_ca_file(
        tls_server: TLSServer, pki: Pki, tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{tls_server.port}"
    assert get(kubeconfig(tmp_path, {"server": server, "certificate-authority": str(pki.ca)}))
    with no_unclosed_sockets(), pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED") \
            as raised:
        get(kubeconfig(tmp_path, {"server": server,
                                  "certificate-authority": str(pki.other_ca)}))
    assert raised.value.status == 0


def test_tls_verifies_the_server_against_the_ca_data(
        tls_server: TLSServer, pki: Pki, tmp_path: Path) -> None:
    assert get(kubeconfig(tmp_path, {"server": f"https://127.0.0.1:{tls_server.port}",
                                     "certificate-authority-data": b64(pki.ca)}))


def test_the_endpoint_and_its_tls_context_are_built_once_per_configuration(
        tls_server: TLSServer, pki: Pki, tmp_path: Path, mocker: Any) -> None:
    built = mocker.spy(transport, "tls_context")
    configuration = load_configuration(kubeconfig(
        tmp_path, {"server": f"https://127.0.0.1:{tls_server.port}",
                   "certificate-authority": str(pki.ca)}))
    kube = Kube(configuration)  # connects with what load_configuration checked
    try:
        assert kube.request("get", "/version")
    finally:
        kube.close()
    assert built.call_count == 1
    assert endpoint(configuration) is endpoint(configuration)


def test_a_configuration_changed_after_its_endpoint_was_built_gets_a_new_one(pki: Pki) -> None:
    configuration = client.Configuration(host="https://127.0.0.1:1")
    configuration.ssl_ca_cert = str(pki.ca)
    first = endpoint(configuration)
    assert first.verifies_tls
    configuration.verify_ssl = False
    assert not endpoint(configuration).verifies_tls
    configuration.host = "https://127.0.0.1:2"
    assert endpoint(configuration).address == ("127.0.0.1", 2)


def test_a_ca_directory_is_refused_at_start_naming_the_field(pki: Pki, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1",
                                   "certificate-authority": str(pki.ca.parent)}, name="dev")
    with pytest.raises(ConfigError) as raised:
        load_configuration(config)
    message = str(raised.value)
    assert "certificate-authority" in message and "is a directory" in message
    assert config in message and "context dev" in message


def test_ca_data_that_is_no_certificate_is_refused_at_start(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1",
                                   "certificate-authority-data":
                                       base64.b64encode(b"not a cert").decode()})
    with pytest.raises(ConfigError, match=r"certificate-authority-data: .*no usable CA"):
        load_configuration(config)


@pytest.mark.parametrize("form", ["files", "data"])
def test_the_client_certificate_is_presented_from_files_and_from_data(
        mtls_server: TLSServer, pki: Pki, tmp_path: Path, form: str) -> None:
    user = ({"client-certificate": str(pki.client_cert), "client-key": str(pki.client_key)}
            if form == "files" else
            {"client-certificate-data": b64(pki.client_cert),
             "client-key-data": b64(pki.client_key)})
    config = kubeconfig(tmp_path, {"server": f"https://127.0.0.1:{mtls_server.port}",
                                   "certificate-authority": str(pki.ca)}, user)
    assert get(config) == {"client": CLIENT_NAME}


@pytest.mark.parametrize(("form", "field"), [("files", "client-key"),
                                             ("data", "client-key-data")])
def test_a_client_key_with_a_password_is_refused_at_start_without_asking_for_it(
        pki: Pki, tmp_path: Path, form: str, field: str) -> None:
    user = ({"client-certificate": str(pki.client_cert),
             "client-key": str(pki.encrypted_client_key)} if form == "files" else
            {"client-certificate-data": b64(pki.client_cert),
             "client-key-data": b64(pki.encrypted_client_key)})
    config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1",
                                   "certificate-authority": str(pki.ca)}, user)
    with pytest.raises(ConfigError) as raised:
        load_configuration(config)
    assert f"user the-user: {field}: the client key " in str(raised.value)
    assert "is encrypted, and a kubeconfig cannot give its password" in str(raised.value)
    if form == "files":
        assert f"the client key {pki.encrypted_client_key} is encrypted" in str(raised.value)


def test_a_client_key_that_does_not_match_its_certificate_is_refused_at_start(
        pki: Pki, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"}, {
        "client-certificate": str(pki.client_cert), "client-key": str(pki.server_key)})
    with pytest.raises(ConfigError, match=r"user the-user: client-certificate: .*do not"):
        load_configuration(config)


def test_insecure_skip_tls_verify_warns_once_at_start_and_never_per_connection(
        tls_server: TLSServer, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        recwarn: pytest.WarningsRecorder) -> None:
    config = kubeconfig(tmp_path, {"server": f"https://127.0.0.1:{tls_server.port}",
                                   "insecure-skip-tls-verify": True})
    with caplog.at_level(logging.WARNING):
        kube = Kube(load_configuration(config))
        try:
            for _ in range(3):
                kube.request("get", "/version")
                kube.discard_idle_connections()  # each request on a new connection
        finally:
            kube.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "TLS verification is off for cluster the-cluster" in warnings[0]
    assert list(recwarn) == [], "no InsecureRequestWarning or any other, per connection"


def test_a_verified_connection_logs_no_warning(
        tls_server: TLSServer, pki: Pki, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        get(kubeconfig(tmp_path, {"server": f"https://127.0.0.1:{tls_server.port}",
                                  "certificate-authority": str(pki.ca)}))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_tls_server_name_is_the_name_verified(
        tls_server: TLSServer, pki: Pki, tmp_path: Path) -> None:
    # "localhost" is not in the certificate; the name it is issued for is.
    server = f"https://localhost:{tls_server.port}"
    with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
        get(kubeconfig(tmp_path, {"server": server, "certificate-authority": str(pki.ca)}))
    assert get(kubeconfig(tmp_path, {"server": server, "certificate-authority": str(pki.ca),
                                     "tls-server-name": SERVER_NAME}))


def test_impersonation_is_refused_at_start_naming_the_field(tmp_path: Path) -> None:
    for field in ("as", "as-groups", "as-uid", "as-user-extra"):
        config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"},
                            {"token": "t", field: "someone"})
        with pytest.raises(ConfigError, match=f"user the-user: `{field}` \\(impersonation\\)"):
            load_configuration(config)


def test_an_auth_provider_the_client_does_not_know_is_refused(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1"},
                        {"auth-provider": {"name": "openstack", "config": {}}})
    with pytest.raises(ConfigError, match="auth-provider 'openstack' is not supported"):
        load_configuration(config)


def test_a_server_that_is_no_url_is_refused() -> None:
    for host in ("ftp://x", "127.0.0.1:6443", "https://x:port"):
        with pytest.raises(UnsupportedSetting) as raised:
            endpoint(client.Configuration(host=host))
        assert raised.value.setting == "host"


class ConnectProxy:
    """An HTTP proxy on 127.0.0.1 that only tunnels (CONNECT), recording each request head."""

    def __init__(self) -> None:
        self.heads: list[str] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                head = b""
                while b"\r\n\r\n" not in head:
                    data = self.request.recv(4096)
                    if not data:
                        return
                    head += data
                text = head.decode("latin-1")
                outer.heads.append(text)
                method, authority = text.split(" ")[:2]
                if method != "CONNECT":
                    self.request.sendall(b"HTTP/1.1 405 Only CONNECT\r\n\r\n")
                    return
                host, port = authority.rsplit(":", 1)
                with socket.create_connection((host, int(port)), 5) as upstream:
                    self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    pipe(self.request, upstream)

        self.raw = RawServer(Handler)
        self.url = f"http://127.0.0.1:{self.raw.port}"

    def stop(self) -> None:
        self.raw.stop()


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    while True:
        readable, _, _ = select.select([a, b], [], [], 10)
        if not readable:
            return
        for sock in readable:
            data = sock.recv(65536)
            if not data:
                return
            (b if sock is a else a).sendall(data)


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    running = ConnectProxy()
    yield running
    running.stop()


def test_proxy_url_is_honoured_through_a_connect_tunnel(
        tls_server: TLSServer, pki: Pki, proxy: ConnectProxy, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, {"server": f"https://127.0.0.1:{tls_server.port}",
                                   "certificate-authority": str(pki.ca),
                                   "proxy-url": proxy.url.replace("://", "://me:p%40ss@")})
    assert get(config)
    assert len(proxy.heads) == 1
    assert proxy.heads[0].startswith(f"CONNECT 127.0.0.1:{tls_server.port} HTTP/1.1\r\n")
    credentials = base64.b64encode(b"me:p@ss").decode()
    assert f"Proxy-Authorization: Basic {credentials}\r\n" in proxy.heads[0]


def test_the_proxy_from_the_environment_is_honoured_and_no_proxy_too(
        tls_server: TLSServer, pki: Pki, proxy: ConnectProxy, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = kubeconfig(tmp_path, {"server": f"https://127.0.0.1:{tls_server.port}",
                                   "certificate-authority": str(pki.ca)})
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert get(config)
    assert len(proxy.heads) == 1, "through the proxy"
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert get(config)
    assert len(proxy.heads) == 1, "NO_PROXY: straight to the server"


@pytest.mark.parametrize("url", ["socks5://127.0.0.1:1080", "https://127.0.0.1:3128"])
def test_a_proxy_it_cannot_use_is_refused_at_start_naming_the_field(
        tmp_path: Path, url: str) -> None:
    config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1", "proxy-url": url},
                        name="behind-proxy")
    with pytest.raises(ConfigError) as raised:
        load_configuration(config)
    message = str(raised.value)
    assert message == (f"{config} (context behind-proxy): cluster the-cluster: proxy-url: "
                       f"the proxy {url}: only http:// proxies are supported, not "
                       f"{url.split('://', maxsplit=1)[0]}://")


def test_a_proxy_password_never_appears_in_a_message(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, {"server": "https://127.0.0.1:1",
                                   "proxy-url": "socks5://me:hunter2@127.0.0.1:1080"})
    with pytest.raises(ConfigError) as raised:
        load_configuration(config)
    assert "hunter2" not in str(raised.value)


def test_a_proxy_that_refuses_the_tunnel_is_a_connection_error(
        tls_server: TLSServer, pki: Pki, tmp_path: Path) -> None:
    class Refusing(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(4096)
            self.request.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    with RawServer(Refusing) as refusing:
        config = kubeconfig(tmp_path, {
            "server": f"https://127.0.0.1:{tls_server.port}",
            "certificate-authority": str(pki.ca),
            "proxy-url": f"http://127.0.0.1:{refusing.port}"})
        with pytest.raises(ApiError) as raised:
            get(config)
    assert (f"the proxy 127.0.0.1:{refusing.port} refused a tunnel to "
            f"127.0.0.1:{tls_server.port}: 403 Forbidden") in str(raised.value)


def test_a_handshake_that_never_completes_ends_within_the_requests_own_timeout() -> None:
    with socket.socket() as listener:  # accepts (the kernel does), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        conns = Connections(endpoint(client.Configuration(host=f"https://127.0.0.1:{port}")),
                            1)
        started = time.monotonic()
        with no_unclosed_sockets(), pytest.raises(TimeoutError):
            conns.request("GET", "/version", None, {}, 0.3)
        assert time.monotonic() - started < CONNECT_TIMEOUT / 2, \
            "the request's 0.3 s, not the connect timeout"


def test_the_head_limits_are_http_clients() -> None:
    assert (MAX_LINE, MAX_HEADERS) == (http.client._MAXLINE,  # type: ignore[attr-defined]
                                       http.client._MAXHEADERS)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("host", "address", "header"), [
    ("https://api.example", ("api.example", 443), "api.example"),
    ("http://api.example", ("api.example", 80), "api.example"),
    ("https://user@api.example:6443/", ("api.example", 6443), "api.example:6443"),
])
def test_the_endpoint_is_the_servers_address_with_the_schemes_default_port(
        host: str, address: tuple[str, int], header: str) -> None:
    target = endpoint(client.Configuration(host=host))
    assert (target.address, target.host_header) == (address, header)
    assert (target.tls is not None) == host.startswith("https")


def test_an_unsupported_setting_says_only_its_message() -> None:
    err = UnsupportedSetting("proxy", "only http:// proxies are supported")
    assert (str(err), err.setting) == ("only http:// proxies are supported", "proxy")


def test_a_ca_that_is_a_directory_is_refused_by_the_transport_too(pki: Pki) -> None:
    configuration = client.Configuration(host="https://127.0.0.1:1")
    configuration.ssl_ca_cert = str(pki.ca.parent)
    with pytest.raises(UnsupportedSetting, match="is a directory") as raised:
        endpoint(configuration)
    assert raised.value.setting == "ssl_ca_cert"


def test_ca_data_given_to_the_configuration_verifies_the_server(
        tls_server: TLSServer, pki: Pki) -> None:
    configuration = client.Configuration(host=f"https://127.0.0.1:{tls_server.port}")
    configuration.ca_cert_data = pki.ca.read_text()
    kube = Kube(configuration)
    try:
        assert kube.request("get", "/version") == {"client": None}
    finally:
        kube.close()
    configuration.ca_cert_data = b"not a certificate"
    with pytest.raises(UnsupportedSetting, match="no usable certificate") as raised:
        endpoint(configuration)
    assert raised.value.setting == "ca_cert_data"


def stream_of(sock: socket.socket, method: str = "GET") -> Stream:
    """The Stream of the answer `sock` is receiving (its head read here)."""
    sock.settimeout(5)
    conn = _Connection(sock, 5)
    return Stream(conn, method, conn.reader.head())


def test_a_stream_with_no_body_ends_at_once() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        assert stream_of(ours).read(5) == b""
    finally:
        theirs.close()
        ours.close()


def test_a_stream_that_ends_with_its_connection_is_read_to_the_end() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        theirs.shutdown(socket.SHUT_WR)
        stream = stream_of(ours)
        assert stream.read_all(5) == b"until the end"
        assert stream.read(5) == b""
    finally:
        theirs.close()
        ours.close()


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nhello",
])
def test_a_stream_cut_short_is_an_http_error(raw: bytes) -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(raw)
        theirs.shutdown(socket.SHUT_WR)
        with pytest.raises(http.client.IncompleteRead):
            stream_of(ours).read_all(5)
    finally:
        theirs.close()
        ours.close()


def test_a_watch_chunk_is_handed_over_without_waiting_for_the_next_one() -> None:
    """A chunk and its CRLF, then a server with nothing more to say yet (a quiet watch):
    the chunk is read at once, not held back until a byte of the next chunk arrives."""
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b'9\r\n{"a": 1}\n\r\n')
        ours.settimeout(2)
        conn = _Connection(ours, 2)
        stream = Stream(conn, "GET", conn.reader.head())
        assert stream.read(64) == b'{"a": 1}\n'
    finally:
        theirs.close()
        ours.close()


def test_a_bad_chunk_size_line_is_named_in_the_error_cut_to_40_bytes() -> None:
    line = b"zz" + b"9" * 60
    with pytest.raises(http.client.HTTPException) as caught:
        answer(CHUNKED + line + b"\r\nx\r\n0\r\n\r\n", delivery="whole")
    assert str(caught.value) == f"not a chunk size line: {line[:40]!r}"


CHUNKED_STREAM = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b'9\r\n{"a": 1}\n\r\n' + b"4;ext=1\r\nbc\n\n\r\n" + b"10\r\n" + b"x" * 16
                  + b"\r\n" + b"0\r\nX-Trailer: t\r\n\r\n")


@pytest.mark.parametrize("trickle", [False, True], ids=["at once", "a byte per receive"])
def test_a_chunked_stream_is_read_a_chunk_at_a_time_however_it_arrives(trickle: bool) -> None:
    chunks = [b'{"a": 1}\n', b"bc\n\n", b"x" * 16]
    raw = CHUNKED_STREAM
    ours, theirs = socket.socketpair()
    try:
        if trickle:
            stream = stream_of(bytewise(raw))  # type: ignore[arg-type]
        else:
            theirs.sendall(raw)  # all of it buffered before the first read
            stream = stream_of(ours)
        reads = []
        while data := stream.read(5):
            reads.append(data)
        assert stream.read(5) == b""
    finally:
        theirs.close()
        ours.close()
    if trickle:
        assert b"".join(reads) == b"".join(chunks)
    else:
        assert reads == chunks


def test_a_chunked_stream_cut_in_two_anywhere_reads_the_same_body() -> None:
    for cut in range(len(CHUNKED_STREAM) + 1):
        stream = stream_of(Pieces(CHUNKED_STREAM[:cut], CHUNKED_STREAM[cut:]))  # type: ignore[arg-type]
        assert stream.read_all(5) == b'{"a": 1}\nbc\n\n' + b"x" * 16, cut


@pytest.mark.parametrize("together", [False, True], ids=["a receive each", "one receive"])
def test_a_stream_read_gives_a_whole_chunk_when_one_is_buffered(together: bool) -> None:
    # What a watch costs per event: the server sends each as one chunk, in one receive, or
    # a burst of them in one.
    events = [b'{"type": "ADDED"}\n', b"y" * 300 + b"\n", b"\n"]
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    stream = stream_of(Pieces(  # type: ignore[arg-type]
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        *([b"".join(chunks)] if together else chunks)))
    assert [stream.read(5) for _ in events] == events


def test_a_stream_ended_by_its_last_chunk_stays_ended() -> None:
    stream = stream_of(Pieces(  # type: ignore[arg-type]
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"))
    assert [stream.read(5), stream.read(5), stream.read(5)] == [b"abc", b"", b""]


def test_a_stream_read_uses_the_timeout_it_is_given() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        stream = stream_of(ours)
        with pytest.raises(TimeoutError):
            stream.read(0.05)
        assert stream._conn.sock.gettimeout() == 0.05
    finally:
        theirs.close()
        ours.close()


def test_a_stream_names_its_connection_by_both_addresses(
        server: Server, connections: Connections) -> None:
    stream = connections.stream("GET", "/stream", {}, 5)
    try:
        local, _, peer = stream.connection.partition(" -> ")
        assert peer == f"127.0.0.1:{server.local.server.server_address[1]}"
        assert local.startswith("127.0.0.1:") and local != peer
    finally:
        stream.close()


def test_a_head_is_returned_as_soon_as_its_blank_line_arrives() -> None:
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(1)
        theirs.sendall(b"HTTP/1.1 200 OK\n\nHTTP/1.1")  # more follows, not yet its end
        assert _Reader(ours).head().status == 200
    finally:
        theirs.close()
        ours.close()


def test_a_large_body_cut_short_says_how_much_is_missing() -> None:
    size = 3 << 20
    with pytest.raises(http.client.IncompleteRead) as raised:
        answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * (1 << 20))
    assert raised.value.expected == size - (1 << 20)
    assert len(raised.value.partial) == 1 << 20


def test_a_client_key_without_its_certificate_is_refused(pki: Pki) -> None:
    configuration = client.Configuration(host="https://127.0.0.1:1")
    configuration.key_file = str(pki.client_key)
    with pytest.raises(UnsupportedSetting, match="without a client certificate") as raised:
        endpoint(configuration)
    assert raised.value.setting == "cert_file"


def test_assert_hostname_false_verifies_the_ca_but_not_the_name(
        tls_server: TLSServer, pki: Pki) -> None:
    configuration = client.Configuration(host=f"https://localhost:{tls_server.port}")
    configuration.ssl_ca_cert = str(pki.ca)
    configuration.assert_hostname = False
    target = endpoint(configuration)
    assert target.tls is not None and not target.tls.check_hostname
    assert target.tls.verify_mode == ssl.CERT_REQUIRED
    kube = Kube(configuration)
    try:
        assert kube.request("get", "/version")  # localhost: not in the certificate
    finally:
        kube.close()


@pytest.mark.parametrize(("url", "address", "authorization"), [
    ("http://127.0.0.1", ("127.0.0.1", 80), None),
    ("127.0.0.1:3128", ("127.0.0.1", 3128), None),
    ("http://me@127.0.0.1:3128", ("127.0.0.1", 3128),
     "Basic " + base64.b64encode(b"me:").decode()),
])
def test_a_proxy_url_is_read_as_http_clients_read_it(
        url: str, address: tuple[str, int], authorization: str | None) -> None:
    configuration = client.Configuration(host="https://api.example")
    configuration.proxy = url
    configuration.proxy_headers = {"X-Proxy-Token": "abc"}
    proxy = endpoint(configuration).proxy
    assert proxy is not None
    assert (proxy.address, proxy.authorization) == (address, authorization)
    assert proxy.headers == (("X-Proxy-Token", "abc"),)


def test_a_proxy_url_without_a_host_is_refused() -> None:
    configuration = client.Configuration(host="https://api.example")
    configuration.proxy = "http://:3128"
    with pytest.raises(UnsupportedSetting, match="names no host"):
        endpoint(configuration)


def test_the_proxys_headers_go_with_the_tunnel_request(
        tls_server: TLSServer, pki: Pki, proxy: ConnectProxy) -> None:
    configuration = client.Configuration(host=f"https://127.0.0.1:{tls_server.port}")
    configuration.ssl_ca_cert = str(pki.ca)
    configuration.proxy = proxy.url
    configuration.proxy_headers = {"X-Proxy-Token": "abc"}
    kube = Kube(configuration)
    try:
        assert kube.request("get", "/version")
    finally:
        kube.close()
    assert "X-Proxy-Token: abc\r\n" in proxy.heads[0]
    assert "Proxy-Authorization" not in proxy.heads[0]


def test_a_plain_http_server_through_a_proxy_is_asked_by_its_absolute_url() -> None:
    heads: list[bytes] = []

    class Proxy(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            heads.append(self.request.recv(4096))
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    with RawServer(Proxy) as proxy_server:
        configuration = client.Configuration(host="http://api.example:8080")
        configuration.proxy = f"http://127.0.0.1:{proxy_server.port}"
        kube = Kube(configuration)
        try:
            assert kube.request("get", "/version") == {}
        finally:
            kube.close()
    assert heads[0].startswith(b"GET http://api.example:8080/version HTTP/1.1\r\n")
    assert b"\r\nHost: api.example:8080\r\n" in heads[0]


def test_a_proxy_that_sends_more_than_its_tunnel_answer_is_an_error(
        tls_server: TLSServer, pki: Pki) -> None:
    class Chatty(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(4096)
            self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\nsurprise")

    with RawServer(Chatty) as chatty:
        configuration = client.Configuration(host=f"https://127.0.0.1:{tls_server.port}")
        configuration.ssl_ca_cert = str(pki.ca)
        configuration.proxy = f"http://127.0.0.1:{chatty.port}"
        kube = Kube(configuration)
        try:
            with pytest.raises(ApiError, match="bytes after accepting the tunnel"):
                kube.request("get", "/version")
        finally:
            kube.close()


def test_a_head_cut_short_is_an_incomplete_read() -> None:
    with pytest.raises(http.client.IncompleteRead):
        answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n")


def test_a_head_split_across_receives_is_put_together_after_a_timeout() -> None:
    ours, theirs = socket.socketpair()
    try:
        reader = _Reader(ours)
        theirs.sendall(b"HTTP/1.1 2")
        ours.settimeout(0.05)
        with pytest.raises(TimeoutError):
            reader.head()  # the first part is in, its end is not
        theirs.sendall(b"00 OK\r\nRetry-After: 1\r\n\r\n")
        ours.settimeout(5)
        assert reader.head().retry_after == "1"
    finally:
        theirs.close()
        ours.close()


def test_a_chunk_whose_crlf_is_late_is_read_on_after_a_timeout() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc")
        stream = stream_of(ours)
        assert stream.read(5) == b"abc"
        with pytest.raises(TimeoutError):
            stream.read(0.05)  # the chunk's CRLF has not come
        theirs.sendall(b"\r\n2\r\nde\r\n0\r\n\r\n")
        assert stream.read_all(5) == b"de"
    finally:
        theirs.close()
        ours.close()


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\n\r\n"])
def test_a_stream_body_that_comes_in_pieces_is_read_piece_by_piece(head: bytes) -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(head + b"hello")
        stream = stream_of(ours)
        assert stream.read(5) == b"hello"
        theirs.sendall(b", world")
        theirs.shutdown(socket.SHUT_WR)
        assert stream.read(5) == b", world"
        assert stream.read(5) == b""
    finally:
        theirs.close()
        ours.close()


@pytest.mark.parametrize("raw", [b"HTTP/1.1 304 Not Modified\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"])
def test_a_stream_without_a_body_by_its_status_or_method_ends_at_once(raw: bytes) -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(raw)
        method = "GET" if b"304" in raw else "HEAD"
        assert stream_of(ours, method).read(5) == b""
    finally:
        theirs.close()
        ours.close()


# -- TLS session resumption: a new connection resumes an earlier one's session -------------------


def issued(pki: Pki, issuer: str, names: str) -> tuple[Path, Path]:
    """A server certificate and its key, for `names` (a subjectAltName value), signed by the
    test CA `issuer` ("ca", or "other-ca", which the client does not trust)."""
    folder = pki.ca.parent
    stem = f"issued-{len(list(folder.glob('issued-*.crt')))}"  # a new one each time
    key, request, cert, ext = (folder / f"{stem}.{suffix}"
                               for suffix in ("key", "csr", "crt", "ext"))
    ext.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    for args in (["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-out", str(key)],
                 ["req", "-new", "-key", str(key), "-subj", "/CN=elsewhere", "-out",
                  str(request)],
                 ["x509", "-req", "-in", str(request), "-CA", str(folder / f"{issuer}.crt"),
                  "-CAkey", str(folder / f"{issuer}.key"), "-CAcreateserial", "-days", "2",
                  "-extfile", str(ext), "-out", str(cert)]):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
    return cert, key


def serving(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def never_resuming(pki: Pki) -> ssl.SSLContext:
    """The test server's context, with no session tickets and no session kept to resume."""
    context = pki.server_context()
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    return context


class ResumingServer:
    """An HTTPS server that answers GET with whether its connection resumed a TLS session;
    `restart` serves the same port anew (a new process would: new session ticket keys)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._handler = json_handler(
            lambda connection: {"resumed": connection.session_reused})
        self.local = LocalServer(self._handler, tls=context)
        self.port: int = self.local.server.server_address[1]

    def restart(self, context: ssl.SSLContext) -> None:
        self.local.stop()
        port = self.port

        class OnTheSamePort(http.server.ThreadingHTTPServer):
            def __init__(self, address: Any, handler: Any) -> None:
                super().__init__(("127.0.0.1", port), handler)  # not the free one asked

        self.local = LocalServer(self._handler, tls=context, server_class=OnTheSamePort)

    def stop(self) -> None:
        self.local.stop()


@pytest.fixture
def resuming(pki: Pki) -> Iterator[ResumingServer]:
    running = ResumingServer(pki.server_context())
    yield running
    running.stop()


def pool_to(port: int, pki: Pki) -> Connections:
    configuration = client.Configuration(host=f"https://127.0.0.1:{port}")
    configuration.ssl_ca_cert = str(pki.ca)
    return Connections(endpoint(configuration), maxsize=4)


@pytest.fixture
def tls_conns(resuming: ResumingServer, pki: Pki) -> Iterator[Connections]:
    connections = pool_to(resuming.port, pki)
    yield connections
    connections.close()


def get_on_a_new_connection(conns: Connections) -> Response:
    conns.discard_idle()
    return conns.request("GET", "/version", None, {}, 5)


def offered(spy: Any) -> list[bool]:
    """Per handshake the spy saw: was a session offered?"""
    return [call.kwargs["session"] is not None for call in spy.call_args_list]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3],
                         ids=["tls1.2", "tls1.3"])
def test_every_connection_after_the_first_resumes_the_session_and_works(
        pki: Pki, version: ssl.TLSVersion) -> None:
    context = pki.server_context()
    context.maximum_version = version
    server = ResumingServer(context)
    conns = pool_to(server.port, pki)
    try:
        answers = [get_on_a_new_connection(conns) for _ in range(4)]
    finally:
        conns.close()
        server.stop()
    assert [json.loads(answer.data) for answer in answers] == \
        [{"resumed": False}] + [{"resumed": True}] * 3


def test_a_connection_opened_for_a_stream_gives_its_session_to_the_next(
        resuming: ResumingServer, tls_conns: Connections) -> None:
    stream = tls_conns.stream("GET", "/version", {}, 5)
    assert stream.read_all(5) == b'{"resumed": false}'
    stream.close()
    assert get_on_a_new_connection(tls_conns).data == b'{"resumed": true}'


def test_the_session_is_read_once_from_the_connection_that_made_it(
        resuming: ResumingServer, tls_conns: Connections, mocker: Any) -> None:
    # Reading one costs half of what resuming saves: the ssl module copies it, certificate too.
    real: property = vars(ssl.SSLSocket)["session"]
    reads: list[ssl.SSLSocket] = []

    def read(sock: ssl.SSLSocket) -> ssl.SSLSession | None:
        reads.append(sock)
        session: ssl.SSLSession | None = real.__get__(sock)
        return session

    mocker.patch.object(ssl.SSLSocket, "session", property(read, real.fset))
    answers = [tls_conns.request("GET", "/version", None, {}, 5).data for _ in range(3)]
    answers += [get_on_a_new_connection(tls_conns).data for _ in range(2)]
    assert answers == [b'{"resumed": false}'] * 3 + [b'{"resumed": true}'] * 2
    assert len(reads) == 1


@pytest.mark.parametrize(("issuer", "names", "fault"), [
    ("other-ca", f"DNS:{SERVER_NAME},IP:127.0.0.1", "unable to get local issuer certificate"),
    ("ca", "DNS:elsewhere.configmirror.test", "IP address mismatch"),
], ids=["untrusted-ca", "another-name"])
def test_a_server_back_with_a_certificate_to_refuse_is_refused_as_without_a_session(
        resuming: ResumingServer, tls_conns: Connections, pki: Pki, mocker: Any,
        issuer: str, names: str, fault: str) -> None:
    get_on_a_new_connection(tls_conns)  # a session kept
    resuming.restart(serving(*issued(pki, issuer, names)))
    handshakes = mocker.spy(tls_conns.endpoint.tls, "wrap_socket")
    with no_unclosed_sockets(), pytest.raises(ssl.SSLCertVerificationError) as offering:
        get_on_a_new_connection(tls_conns)
    fresh = Connections(tls_conns.endpoint, maxsize=1)
    with no_unclosed_sockets(), pytest.raises(ssl.SSLCertVerificationError) as without:
        get_on_a_new_connection(fresh)
    assert offered(handshakes) == [True, False]
    assert fault in str(offering.value)
    assert str(offering.value) == str(without.value)


def test_a_session_a_handshake_failed_with_is_offered_no_more(
        resuming: ResumingServer, tls_conns: Connections, pki: Pki, mocker: Any) -> None:
    get_on_a_new_connection(tls_conns)
    resuming.restart(serving(*issued(pki, "other-ca", "IP:127.0.0.1")))
    handshakes = mocker.spy(tls_conns.endpoint.tls, "wrap_socket")
    for _ in range(2):
        with pytest.raises(ssl.SSLCertVerificationError):
            get_on_a_new_connection(tls_conns)
    assert offered(handshakes) == [True, False]


def test_a_failed_handshake_leaves_the_session_another_connection_brought_meanwhile(
        resuming: ResumingServer, tls_conns: Connections, pki: Pki, mocker: Any) -> None:
    for _ in range(2):
        get_on_a_new_connection(tls_conns)  # a session kept, and resumed
    resuming.restart(pki.server_context())  # worthless now
    tls = tls_conns.endpoint.tls
    assert tls is not None
    handshake = tls.wrap_socket

    def failing_after_another_connection(sock: socket.socket, **kwargs: Any) -> ssl.SSLSocket:
        if handshakes.call_count > 1:
            return handshake(sock, **kwargs)
        sock.close()  # this handshake fails (the test server handshakes one at a time)...
        tls_conns.request("GET", "/version", None, {}, 5)  # ...after another one's, full
        raise ssl.SSLError("the handshake failed")

    handshakes = mocker.patch.object(tls, "wrap_socket",
                                     side_effect=failing_after_another_connection)
    with pytest.raises(ssl.SSLError, match="the handshake failed"):
        get_on_a_new_connection(tls_conns)
    assert get_on_a_new_connection(tls_conns).data == b'{"resumed": true}'


def test_a_session_the_server_declines_gives_way_to_the_new_connections_own(
        resuming: ResumingServer, tls_conns: Connections, pki: Pki, mocker: Any) -> None:
    for _ in range(2):
        get_on_a_new_connection(tls_conns)  # a session kept, and resumed
    resuming.restart(pki.server_context())  # new ticket keys: the session is worthless
    handshakes = mocker.spy(tls_conns.endpoint.tls, "wrap_socket")
    answers = [get_on_a_new_connection(tls_conns).data for _ in range(3)]
    assert answers == [b'{"resumed": false}', b'{"resumed": true}', b'{"resumed": true}']
    assert offered(handshakes) == [True, True, True]


def test_a_server_that_never_resumes_gets_full_handshakes_that_work(
        pki: Pki, mocker: Any) -> None:
    server = ResumingServer(never_resuming(pki))
    conns = pool_to(server.port, pki)
    handshakes = mocker.spy(conns.endpoint.tls, "wrap_socket")
    try:
        answers = [get_on_a_new_connection(conns) for _ in range(3)]
    finally:
        conns.close()
        server.stop()
    assert [(answer.status, answer.data) for answer in answers] == \
        [(200, b'{"resumed": false}')] * 3
    assert offered(handshakes) == [False] * 3


def test_a_server_back_without_resumption_is_offered_the_old_session_once(
        resuming: ResumingServer, tls_conns: Connections, pki: Pki, mocker: Any) -> None:
    get_on_a_new_connection(tls_conns)
    resuming.restart(never_resuming(pki))
    handshakes = mocker.spy(tls_conns.endpoint.tls, "wrap_socket")
    answers = [get_on_a_new_connection(tls_conns).data for _ in range(3)]
    assert answers == [b'{"resumed": false}'] * 3
    assert offered(handshakes) == [True, False, False]


def balancer(order: list[int]) -> RawServer:
    """A TCP balancer on 127.0.0.1 that sends each new connection to the next port of `order`,
    as a Service's proxy spreads them over API servers."""
    ports = iter(order)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with socket.create_connection(("127.0.0.1", next(ports)), 5) as upstream:
                pipe(self.request, upstream)

    return RawServer(Handler)


def test_a_pool_stops_offering_sessions_once_declined_more_than_resumed(
        pki: Pki, mocker: Any) -> None:
    servers = [ResumingServer(pki.server_context()) for _ in range(3)]  # keys of their own
    a, b, c = (server.port for server in servers)
    with balancer([a, a, b, c, a, b]) as spreading:
        conns = pool_to(spreading.port, pki)
        handshakes = mocker.spy(conns.endpoint.tls, "wrap_socket")
        try:
            answers = [get_on_a_new_connection(conns).data for _ in range(6)]
        finally:
            conns.close()
            for server in servers:
                server.stop()
    assert [json.loads(answer)["resumed"] for answer in answers] == \
        [False, True, False, False, False, False]
    # Resumed 1 (a), declined 1 (b, whose session is kept), declined 2 (c): no more offers.
    assert offered(handshakes) == [False, True, True, True, False, False]

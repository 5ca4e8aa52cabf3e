"""The transport's HTTP/1.1 parser against h11 (the sans-IO reference): generated answers
(status lines, header sets, interim 1xx, Content-Length, chunked and close-framed bodies,
keep-alive and close), delivered cut at random receive boundaries, read whole (a request's
answer) and as a stream (a watch). A well-formed answer must read exactly as h11 reads it; a
malformed one (a fault in what frames it, or an answer cut short) must end in an
http.client error on both paths, never a hang or a body.

`make fuzz` runs the same properties for longer, once per seed in h11_fuzz_seeds.txt (the
HYPOTHESIS_PROFILE and --hypothesis-seed it passes); CI runs them with the profile below.
"""

from __future__ import annotations

import http.client
import os
import random
from dataclasses import dataclass

import h11
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from configmirror.client.transport import Stream, _Body, _Connection, _Reader
from configmirror_testing.sockets import Pieces

# 10,000 answers per CI run (7,000 well-formed, 3,000 malformed: about 25 s of CPU); `make
# fuzz`: 50,000 per seed.
settings.register_profile("h11-ci", max_examples=7_000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("h11-quick", max_examples=500, deadline=None, database=None)
settings.register_profile("h11-fuzz", max_examples=50_000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "h11-ci")
                               if os.environ.get("HYPOTHESIS_PROFILE", "").startswith("h11-")
                               else "h11-ci")
MALFORMED = settings(PROFILE, max_examples=max(PROFILE.max_examples * 3 // 7, 1))

# Most receives a reader may ask for before it is taken to be hung at the end of its bytes.
MOST_RECEIVES = 10_000


def receives(pieces: list[bytes]) -> Pieces:
    """The pieces one per receive; a reader that keeps asking at the end is stopped as hung."""
    return Pieces(*pieces, most=MOST_RECEIVES)


@dataclass(frozen=True)
class Read:
    """What a parser made of an answer."""

    status: int
    reason: str
    retry_after: str | None
    body: bytes
    reusable: bool   # the connection may carry the next request
    rest: bytes      # bytes after the answer, left unread


def by_h11(method: str, pieces: list[bytes]) -> Read:
    """The answer as h11 reads it, fed the same pieces; raises h11's errors."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=1 << 20)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    final: h11.Response | None = None
    body = []
    reusable: bool | None = None
    for piece in [*(p for p in pieces if p), b""]:  # b"": the end of the connection
        conn.receive_data(piece)
        while reusable is None:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.Response):
                final = event
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                reusable = conn.their_state is h11.DONE and piece != b""
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("closed without an answer")
    assert final is not None and reusable is not None
    retry = [v for k, v in final.headers if k == b"retry-after"]
    return Read(final.status_code, final.reason.decode("latin-1"),
                retry[-1].decode("latin-1") if retry else None, b"".join(body), reusable,
                conn.trailing_data[0])


def by_response(method: str, pieces: list[bytes]) -> Read:
    """The answer as Connections.request reads it: whole."""
    reader = _Reader(receives(pieces))  # type: ignore[arg-type]
    response, reusable = reader.response(method)
    return Read(response.status, response.reason, response.retry_after, response.data,
                reusable, reader.to_end())


def by_stream(method: str, pieces: list[bytes]) -> Read:
    """The answer as a watch reads it: a Stream, read by read."""
    conn = _Connection(receives(pieces), 5)  # type: ignore[arg-type]
    head = conn.reader.head()
    stream = Stream(conn, method, head)
    parts = []
    while data := stream.read(5):
        parts.append(data)
    assert stream.read(5) == b""  # ended, and stays so
    reusable = _Body(method, head).reusable
    return Read(stream.status, stream.reason, stream.retry_after, b"".join(parts), reusable,
                conn.reader.to_end())


# -- answers ---------------------------------------------------------------------------------
#
# Hypothesis draws what shapes an answer (method, statuses, framing, the fault); a seeded
# Random draws its details (names, values, blanks, line breaks, cuts). That keeps an example
# cheap (the properties run 10,000 times in CI) and every failure reproducible from its draws.

FIELD_CHARS = bytes([*range(0x01, 0x09), *range(0x0e, 0x20), *range(0x21, 0x100)])  # h11's
TOKEN_CHARS = b"-!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
NAMES = [b"Audit-Id", b"Cache-Control", b"Content-Type", b"Date", b"Warning", b"Vary",
         b"X-Kubernetes-Pf-Flowschema-Uid", b"X-Kubernetes-Pf-Prioritylevel-Uid"]
WANTED = {b"connection", b"content-length", b"transfer-encoding", b"retry-after"}


@dataclass(frozen=True)
class Answer:
    method: str
    raw: bytes
    framing: str  # "none", "length", "chunked" or "close"
    body_at: int  # where the final answer's body begins in raw
    end: int      # where the answer ends (bytes after it are the next one's)


class Details:
    """The details of one answer, from a seeded Random."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def chars(self, alphabet: bytes, low: int, high: int) -> bytes:
        return bytes(self.rng.choices(alphabet, k=self.rng.randint(low, high)))

    def ows(self) -> bytes:
        return self.rng.choice([b"", b"", b" ", b"\t", b"  "])

    def eol(self) -> bytes:  # h11 and RFC 9112 2.2: a bare LF ends a line too
        return b"\n" if self.rng.random() < 0.15 else b"\r\n"

    def any_case(self, word: bytes) -> bytes:
        return bytes(c ^ 0x20 if chr(c).isalpha() and self.rng.random() < 0.3 else c
                     for c in word)

    def value(self) -> bytes:
        """An RFC 9110 5.5 field value, as h11 reads it: visible (or obs-text) characters,
        blanks only inside."""
        return self.chars(FIELD_CHARS + b" \t" * 10, 0, 24).strip(b" \t")

    def field(self, name: bytes | None = None, value: bytes | None = None) -> bytes:
        """One header line, without its line break (perhaps folded, when not read)."""
        if name is None:
            name = self.rng.choice(NAMES) if self.rng.random() < 0.6 else \
                self.chars(TOKEN_CHARS, 1, 12)
        name = self.any_case(name)
        value = self.value() if value is None else value
        line = name + b":" + self.ows() + value + (self.ows() if value else b"")
        if value and name.lower() not in WANTED and self.rng.random() < 0.1:
            line += self.eol() + self.rng.choice([b" ", b"\t"]) + \
                (self.value() or b"more")
        return line

    def fields(self, most: int) -> list[bytes]:
        return [self.field() for _ in range(self.rng.randint(0, most))]

    def connection(self) -> list[bytes]:
        tokens = self.rng.choices([b"close", b"Close", b"keep-alive", b"Upgrade", b"x-close",
                                   b"closed"], k=self.rng.randint(0, 3))
        parts = [self.ows() + t + self.ows() for t in tokens]
        if not parts:
            return []
        if len(parts) > 1 and self.rng.random() < 0.5:  # over two fields
            return [self.field(b"Connection", parts[0].strip(b" \t")),
                    self.field(b"Connection", b",".join(parts[1:]).strip(b" \t"))]
        return [self.field(b"Connection", b",".join(parts).strip(b" \t"))]

    def head(self, status: int, fields: list[bytes]) -> bytes:
        version = b"1.0" if self.rng.random() < 0.2 else b"1.1"
        line = b"HTTP/" + version + b" %03d" % status
        if self.rng.random() < 0.9:
            line += b" " + self.chars(FIELD_CHARS + b" \t" * 10, 0, 20)  # a reason
        fields = list(fields)
        self.rng.shuffle(fields)
        return b"".join(line + self.eol() for line in [line, *fields]) + self.eol()

    def chunks(self, payload: bytes) -> bytes:
        body, at = b"", 0
        while at < len(payload):
            size = self.rng.randint(1, len(payload) - at)
            line = self.rng.choice([b"%x", b"%X", b"%04x"]) % size
            line += self.rng.choice([b"", b"", b";a=b", b"; x", b" ", b"\t"])
            body += line + b"\r\n" + payload[at:at + size] + b"\r\n"
            at += size
        body += self.rng.choice([b"0", b"000", b"0;last"]) + b"\r\n"
        body += b"".join(line + self.eol() for line in self.fields(2))  # a trailer
        return body + self.eol()

    def cuts(self, raw: bytes) -> list[bytes]:
        """`raw` cut at random receive boundaries (sometimes a byte per receive)."""
        if self.rng.random() < 0.05:
            return [raw[i:i + 1] for i in range(len(raw))]
        points = sorted(self.rng.choices(range(len(raw) + 1), k=self.rng.randint(0, 8)))
        return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]


METHODS = st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"])
STATUSES = st.sampled_from([200, 201, 204, 304, 404, 409, 429, 500, 503, 599])
FRAMINGS = st.sampled_from(["length", "chunked", "close"])


@st.composite
def answers(draw: st.DrawFn) -> tuple[Answer, Details]:
    method, status, framing = draw(METHODS), draw(STATUSES), draw(FRAMINGS)
    interim = draw(st.lists(st.sampled_from([100, 102, 103, 199]), max_size=2))
    payload = draw(st.binary(max_size=300))
    more = Details(draw(st.integers(0, 2**32)))
    raw = b"".join(more.head(code, more.fields(3)) for code in interim)
    fields = more.fields(6) + more.connection()
    if more.rng.random() < 0.5:
        fields.append(more.field(b"Retry-After", b"%d" % more.rng.randint(0, 999)))
    bodiless = method == "HEAD" or status in (204, 304)
    body = b""
    if framing == "length":
        digits = more.rng.choice([b"%d", b"%03d"]) % \
            (more.rng.randint(0, 500) if bodiless else len(payload))
        fields.append(more.field(b"Content-Length", more.rng.choice(
            [digits, digits, digits + b", " + digits, digits + b"," + digits])))
        if more.rng.random() < 0.15:
            fields.append(more.field(b"Content-Length", digits))
        body = payload
    elif framing == "chunked":
        fields.append(more.field(b"Transfer-Encoding", more.any_case(b"chunked")))
        if more.rng.random() < 0.15:  # a length beside it: chunked wins
            fields.append(more.field(b"Content-Length", b"%d" % more.rng.randint(0, 99)))
        body = more.chunks(payload)
    raw += more.head(status, fields)
    body_at = len(raw)
    if not bodiless:
        raw += body if framing != "close" else payload
    end = len(raw)
    if framing != "close" and more.rng.random() < 0.5:  # what comes next, left unread
        raw += more.rng.choice([b"HTTP/1.1 200 OK\r\n", b"x", b"\r\n"])
    return Answer(method, raw, "none" if bodiless else framing, body_at, end), more


@given(answers())
@PROFILE
@example(None)  # type: ignore[arg-type]
def test_a_well_formed_answer_reads_as_h11_reads_it_however_it_is_cut(
        drawn: tuple[Answer, Details] | None) -> None:
    if drawn is None:  # the answer of a write, as the API server sends it
        method, pieces = "POST", [b"HTTP/1.1 201 Created\r\nAudit-Id: 1\r\nCache-Control: "
                                  b"no-cache, private\r\nContent-Type: application/json\r\n"
                                  b"Date: Wed, 02 Dec 2026 06:00:00 GMT\r\nContent-Length: 2"
                                  b"\r\n\r\n{}"]
    else:
        answer, more = drawn
        method, pieces = answer.method, more.cuts(answer.raw)
    expected = by_h11(method, pieces)
    assert by_response(method, pieces) == expected
    assert by_stream(method, pieces) == expected


# -- malformed answers -------------------------------------------------------------------------

FAULTS = {
    "status": [b"HTTP/1.1 2000 OK", b"HTTP/1.1 20 OK", b"HTTP/1 200 OK", b"http/1.1 200 OK",
               b"HTTP/1.1  200 OK", b"HTTP/11 200", b"HTTP/1.1 099 Low",
               b"HTTP/1.1 101 Switching", b"HTTP/1.1 2x0 OK", b"SSH-2.0-OpenSSH_9.6", b""],
    "field": [b"no colon here", b"Content-Length : 1", b": empty name", b" folded: first",
              b"Connection: a\x00b", b"Retry-After: 1\x0b2", b"Content-Length: 1\r2"],
    "length": [b"x", b"-1", b"+1", b"1_0", b"1 2", b"1, 2", b"", b"0x10", b"9" * 21],
    "coding": [b"gzip", b"gzip, chunked", b"chunked, gzip", b"identity",
               b"chunked\r\nTransfer-Encoding: chunked"],
    "chunk size": [b"zz", b" 1", b"0x1", b"-1", b"", b"1 ;x", b"1\n", b"1" * 21],
    "chunk end": [b"\n", b"XX", b"\r", b""],
    "cut": [b""],
}


def line_end(raw: bytes, at: int) -> int:
    """Where the line break of the line at `at` begins."""
    end = raw.index(b"\n", at)
    return end - (raw[end - 1:end] == b"\r")


@st.composite
def faults(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    """A well-formed answer with one fault in what frames it (or cut short), cut in pieces."""
    answer, more = draw(answers())
    raw = answer.raw
    final = raw.rindex(b"HTTP/", 0, answer.body_at)  # the final answer's status line
    kinds = ["status", "field", "cut"]
    if b"ontent-length" in raw[final:answer.body_at].lower():
        kinds.append("length")
    if answer.framing == "chunked":
        kinds += ["chunk size", "chunk end", "coding"]
    kind = draw(st.sampled_from(kinds))
    bad = draw(st.sampled_from(FAULTS[kind]))
    if kind == "status":
        raw = raw[:final] + bad + raw[line_end(raw, final):]
    elif kind == "field":  # first after the status line
        after = raw.index(b"\n", final) + 1
        raw = raw[:after] + bad + b"\r\n" + raw[after:]
    elif kind in ("length", "coding"):
        name = b"content-length:" if kind == "length" else b"transfer-encoding:"
        at = raw.lower().index(name, final) + len(name)
        raw = raw[:at] + b" " + bad + raw[line_end(raw, at):]
    elif kind == "chunk size":
        raw = raw[:answer.body_at] + bad + raw[raw.index(b"\r\n", answer.body_at):]
    elif kind == "chunk end":
        if raw[answer.body_at:answer.body_at + 1] == b"0":  # no data chunk: give it one
            raw = raw[:answer.body_at] + b"1\r\nx\r\n" + raw[answer.body_at:]
        size_end = raw.index(b"\r\n", answer.body_at)
        size = int(raw[answer.body_at:size_end].split(b";")[0].strip(b" \t"), 16)
        end = size_end + 2 + size
        raw = raw[:end] + bad + raw[end + 2:]
    else:  # cut short: inside a head, or inside a body framed by its length or chunks
        last = answer.body_at if answer.framing == "close" else answer.end
        raw = raw[:more.rng.randint(0, last - 1)]
    return answer.method, more.cuts(raw)


@given(faults())
@MALFORMED
@example(("GET", [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"]))
def test_a_malformed_answer_is_an_http_error_on_both_paths(
        fault: tuple[str, list[bytes]]) -> None:
    method, pieces = fault
    with pytest.raises(h11.ProtocolError):
        by_h11(method, pieces)  # the fault is one for h11 too
    with pytest.raises(http.client.HTTPException):
        by_response(method, pieces)
    with pytest.raises(http.client.HTTPException):
        by_stream(method, pieces)

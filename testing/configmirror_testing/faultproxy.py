"""A TCP proxy on 127.0.0.1 that breaks the wire on demand, between a client and its server.

Network faults in the tests come from here, on the wire: the operator's kubeconfig names the
proxy, TLS passes through it untouched, and the client under test is never patched.

    with FaultProxy(("127.0.0.1", apiserver_port)) as proxy:
        proxy.write_kubeconfig(cluster_kubeconfig, path)   # the same cluster, via the proxy
        proxy.silent_drop()      # every open connection stops carrying bytes, stays open
        proxy.reset()            # every open connection gets a TCP RST
        proxy.latency(0.2)       # 200 ms added each way
        proxy.bandwidth(64_000)  # bytes per second each way
        proxy.answer_new(False)  # new connections are accepted and never answered
        proxy.drop_answers(True) # requests reach the server, its answers are dropped
        proxy.heal()             # no latency, no cap, new connections answered again

Why not Toxiproxy (a well-kept Go tool, buildable from its module): its toxics apply to a
proxy's links as a whole, the new ones included, so it cannot make the connections open at
one moment silent for good while new ones work, which is what a NAT or a load balancer that
forgets idle flows does, and what issue 25's silent drop is. Per-connection state is a few
lines here. It listens on 127.0.0.1 only, forwards only to a loopback address, runs its
event loop on a thread of its own, and `stop()` (or leaving the `with`) closes every
connection and joins that thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")
_CHUNK = 65536


class _Direction:
    """One way of one connection: bytes read from `source`, sent to `sink` after the
    latency and within the bandwidth in force."""

    def __init__(self, proxy: FaultProxy, source: asyncio.StreamReader,
                 sink: asyncio.StreamWriter, answers: bool = False) -> None:
        self.proxy = proxy
        self.answers = answers  # the server's way back to the client
        self.source = source
        self.sink = sink
        self.queue: deque[tuple[float, bytes]] = deque()  # (when due, bytes), in order
        self.ready = asyncio.Event()

    async def read(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        while data := await self.source.read(_CHUNK):
            if link.silent or (self.answers and self.proxy.dropping_answers):
                continue  # read and dropped: the sender's writes still succeed
            self.queue.append((loop.time() + self.proxy.delay, data))
            self.ready.set()
        self.queue.append((loop.time() + self.proxy.delay, b""))  # the end, in its turn
        self.ready.set()

    async def send(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                self.ready.clear()
                await self.ready.wait()
            due, data = self.queue.popleft()
            if link.silent:
                self.queue.clear()
                continue
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            if link.silent:
                continue
            if not data:
                if self.sink.can_write_eof():
                    self.sink.write_eof()
                return
            self.sink.write(data)
            await self.sink.drain()
            if self.proxy.rate:
                await asyncio.sleep(len(data) / self.proxy.rate)


class _Link:
    """One client connection and its connection to the upstream server."""

    def __init__(self, client: asyncio.StreamWriter,
                 upstream: asyncio.StreamWriter | None) -> None:
        self.client = client
        self.upstream = upstream  # None: accepted while new connections go unanswered
        self.silent = upstream is None
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self, reset: bool) -> None:
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if reset and sock is not None:
                with contextlib.suppress(OSError):  # linger 0: close() sends an RST
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """Forwards 127.0.0.1:`port` to `upstream` (a loopback address) until stopped."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        if not ipaddress.ip_address(upstream[0]).is_loopback:
            raise ValueError(f"FaultProxy forwards to this machine only, not {upstream[0]}")
        self.upstream = upstream
        self.delay = 0.0          # seconds added each way
        self.rate = 0             # bytes per second each way (0: no cap)
        self.answering = True     # False: new connections are accepted and never answered
        self.dropping_answers = False  # True: what the server sends back is dropped
        self.accepted = 0         # client connections accepted so far
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy")
        self._server: asyncio.Server | None = None
        self.port = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def write_kubeconfig(self, kubeconfig: Path, path: Path) -> Path:
        """A copy of `kubeconfig` (JSON or YAML) whose clusters are reached through here."""
        import yaml

        doc = yaml.safe_load(kubeconfig.read_text())
        for cluster in doc.get("clusters") or ():
            cluster["cluster"]["server"] = self.url
        path.write_text(json.dumps(doc))
        return path

    # -- faults -------------------------------------------------------------------------------

    def silent_drop(self) -> int:
        """Every connection open now stops carrying bytes both ways, and stays open (what is
        sent on it is read and dropped). New connections are not affected. Returns how many."""
        return self._call(self._silence())

    def reset(self) -> int:
        """Every connection open now is closed with a TCP RST on both sides. Returns how many."""
        return self._call(self._reset())

    def latency(self, seconds: float) -> None:
        """Add `seconds` each way, to every connection, from now."""
        self.delay = seconds

    def bandwidth(self, bytes_per_second: int) -> None:
        """At most this many bytes per second each way, per connection (0: no cap)."""
        self.rate = bytes_per_second

    def answer_new(self, answering: bool) -> None:
        """False: new connections are accepted (the TCP handshake completes) and then get no
        byte, ever; what they send is dropped. True: they are forwarded again."""
        self.answering = answering

    def drop_answers(self, dropping: bool) -> None:
        """True: from now on, on every connection (open or new), what the client sends reaches
        the server and what the server sends back is dropped: a write is applied and its
        answer lost, as when a server dies between the two. False: answers pass again (those
        dropped meanwhile stay lost)."""
        self.dropping_answers = dropping

    def heal(self) -> None:
        """No latency, no cap, new connections answered, answers passed. Silent connections
        stay silent."""
        self.delay, self.rate, self.answering = 0.0, 0, True
        self.dropping_answers = False

    def connections(self) -> int:
        """Client connections open now (silent ones included)."""
        return self._call(self._count())

    # -- the event loop's side ----------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if not self.answering:
            link = _Link(writer, None)
            self._links.add(link)
            try:
                while await reader.read(_CHUNK):
                    pass  # accepted, never answered
            finally:
                self._forget(link)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        there = _Direction(self, reader, up_writer)
        back = _Direction(self, up_reader, writer, answers=True)
        link.tasks = [asyncio.create_task(step(link)) for step in
                      (there.read, there.send, back.read, back.send)]
        try:
            await asyncio.gather(*link.tasks)
        except (OSError, asyncio.CancelledError):
            pass  # a side reset, or the link was aborted: it ends here
        finally:
            self._forget(link)

    def _forget(self, link: _Link) -> None:
        self._links.discard(link)
        link.abort(reset=False)

    async def _silence(self) -> int:
        for link in self._links:
            link.silent = True
        return len(self._links)

    async def _reset(self) -> int:
        links, self._links = list(self._links), set()
        for link in links:
            link.abort(reset=True)
        return len(links)

    async def _count(self) -> int:
        return len(self._links)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort(reset=False)
        self._links.clear()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

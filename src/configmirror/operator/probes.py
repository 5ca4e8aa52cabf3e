"""The operator's HTTP endpoints, one component of the manager: /healthz and /readyz on the
health probe address, /metrics on the metrics address (one server when the two are the same;
'' or '0' turns one off).

Each address is served by a small threaded HTTP server on a thread of the component's own,
which stop() ends and joins. The servers' per-request threads are daemons: a probe or a
scrape is a short request, and a shutdown must not wait for a client that stopped reading.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from configmirror.lifecycle import Deadline, OwnedThread

log = logging.getLogger(__name__)

# A route's answer: (status, content type, body).
Route = Callable[[], tuple[int, str, bytes]]
POLL_INTERVAL = 0.2  # how soon a server's thread sees stop()


class Probes:
    """Serves the probes and metrics from start() to stop()."""

    def __init__(self, health_address: str, metrics_address: str, healthy: Callable[[], bool],
                 ready: Callable[[], bool], registry: CollectorRegistry) -> None:
        """`healthy` answers /healthz, `ready` /readyz; /metrics is `registry`'s."""
        self._routes: dict[str, dict[str, Route]] = {}
        for address, paths in (
            (health_address, {"/healthz": lambda: _probe(healthy()),
                              "/readyz": lambda: _probe(ready())}),
            (metrics_address, {"/metrics": lambda: (200, CONTENT_TYPE_LATEST,
                                                    generate_latest(registry))}),
        ):
            if address not in ("", "0"):
                self._routes.setdefault(address, {}).update(paths)
        self._servers: list[_HTTPServer] = []

    @property
    def addresses(self) -> list[str]:
        """The addresses served (host:port as bound), once started."""
        return [server.address for server in self._servers]

    def start(self) -> None:
        """Bind every address (an address in use raises OSError) and serve it."""
        for address, paths in self._routes.items():
            server = _HTTPServer(address, paths)
            self._servers.append(server)
            server.start()
            log.info("serving %s on %s", ", ".join(sorted(paths)), server.address)

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop serving, within `timeout` seconds; True once every server's thread ended."""
        deadline = Deadline(timeout)
        for server in self._servers:
            server.signal()
        return all([server.stop(deadline.left()) for server in self._servers])


def _probe(ok: bool) -> tuple[int, str, bytes]:
    return (200, "text/plain", b"ok") if ok else (500, "text/plain", b"not ok")


class _HTTPServer:
    """A small threaded HTTP server on a thread its owner joins."""

    def __init__(self, address: str, routes: dict[str, Route]) -> None:
        host, _, port = address.rpartition(":")
        # A host left out (":8080") is "": every interface, as the flags' defaults mean.
        self._server = ThreadingHTTPServer((host, int(port)), _handler(routes))
        self._server.daemon_threads = True  # per-request threads; the serving thread is joined
        # handle_request() waits at most this long for a connection: the loop sees stop().
        self._server.timeout = POLL_INTERVAL
        self._stopping = threading.Event()
        self._thread = OwnedThread(f"http-{port}", self._serve)
        self.address = f"{self._server.server_address[0]!s}:{self._server.server_port}"

    def start(self) -> None:
        self._thread.start()

    def signal(self) -> None:
        """Tell the serving thread to end (it sees it within POLL_INTERVAL)."""
        self._stopping.set()

    def stop(self, timeout: float) -> bool:
        """After signal(): wait up to `timeout` seconds for the serving thread to end, then
        close the socket; True once it has ended."""
        if not self._thread.join(timeout):
            return False  # closing the socket under its select() would be a race
        self._server.server_close()
        return True

    def _serve(self) -> None:
        # Not serve_forever(): its shutdown() waits for the loop without a timeout.
        while not self._stopping.is_set():
            self._server.handle_request()


def _handler(routes: dict[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.partition("?")[0])
            status, content_type, body = route() if route else (404, "text/plain",
                                                                b"not found")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would drown the log

    return Handler

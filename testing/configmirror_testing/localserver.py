"""A test's own HTTP(S) server on 127.0.0.1: started on a free port, served from a thread of
its own, stopped and joined by the test that started it; and a check that the client under
test closed every socket it dropped."""

from __future__ import annotations

import contextlib
import gc
import http.server
import socketserver
import ssl
import threading
import warnings
from collections.abc import Iterator
from types import TracebackType


class LocalServer:
    """Serves `handler` on 127.0.0.1 until `stop()`; with `tls`, over HTTPS. `server_class`
    lets a test hook the server's own steps (a ThreadingHTTPServer subclass)."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler],
                 tls: ssl.SSLContext | None = None,
                 server_class: type[http.server.ThreadingHTTPServer] =
                 http.server.ThreadingHTTPServer) -> None:
        self.server = server_class(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True  # per-connection threads; serve_forever is joined
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05})
        self.thread.start()
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class RawServer:
    """Serves `handler` (raw bytes over TCP: answers no HTTP server would give, a proxy) on
    127.0.0.1 until `stop()` or the end of its `with` block."""

    def __init__(self, handler: type[socketserver.BaseRequestHandler]) -> None:
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True  # per-connection threads; serve_forever is joined
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05})
        self.thread.start()
        self.port: int = self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@contextlib.contextmanager
def no_unclosed_sockets() -> Iterator[None]:
    """Fails if a socket dropped inside was left to the garbage collector to close: CPython
    closes it anyway, with a ResourceWarning, so only that warning tells the code forgot it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == [], unclosed

"""A test's own HTTP(S) server on 127.0.0.1: started on a free port, served from a thread of
its own, stopped and joined by the test that started it."""

from __future__ import annotations

import http.server
import ssl
import threading


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

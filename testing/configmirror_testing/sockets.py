"""A peer's bytes as a socket delivers them, for tests of the HTTP reader without a network.

    Pieces(b"HTTP/1.1 200 OK\\r\\n", b"Content-Length: 0\\r\\n\\r\\n")   # two receives
"""

from __future__ import annotations


class Pieces:
    """The bytes in the given pieces, one per receive (each cut to what the receive asks
    for), then the end of the connection (b"" for ever). With `most` set, a reader that
    receives more often than that is stopped as hung. With the bytes one by one, the reader
    never has a whole head or chunk buffered, and takes its line by line path."""

    def __init__(self, *pieces: bytes, most: int | None = None) -> None:
        self._pieces = [p for p in pieces if p]
        self._most = most
        self._calls = 0

    def recv(self, limit: int) -> bytes:
        self._calls += 1
        if self._most is not None and self._calls > self._most:
            raise AssertionError("the reader keeps receiving at the end of the connection")
        if not self._pieces:
            return b""
        piece, self._pieces[0] = self._pieces[0][:limit], self._pieces[0][limit:]
        if not self._pieces[0]:
            self._pieces.pop(0)
        return piece

    def recv_into(self, view: memoryview, limit: int) -> int:
        piece = self.recv(min(limit, len(view)))
        view[:len(piece)] = piece
        return len(piece)

    def settimeout(self, timeout: float) -> None:
        pass

    def getsockname(self) -> str:  # as a Stream names its connection: not connected
        raise OSError("not connected")

    getpeername = getsockname

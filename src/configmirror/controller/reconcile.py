"""The contract between the controller and a reconciler (controller-runtime's reconcile package).

A reconciler takes one key, compares desired with actual, writes the difference, and either
returns a `Result` or raises one of the errors below. It never touches the queue: the
controller owns requeue, forget, backoff and giving up, and decides them from this contract.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from configmirror.vocabulary import ObjectRef


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks of the machinery."""

    changed: bool = False                  # it wrote to the API server
    follow_up: tuple[Hashable, ...] = ()   # keys to queue next (a source fans out to targets)
    requeue_after: float | None = None     # see this key again after that many seconds


class ReconcileError(Exception):
    """A failure, with the object whose Events should tell a user about it (if any)."""

    def __init__(self, message: str, subject: ObjectRef | None = None) -> None:
        super().__init__(message)
        self.subject = subject


class RetryableError(ReconcileError):
    """Another attempt may succeed (a conflict with a newer version). Counts toward
    --max-retries; after that the key is given up until its next change or resync."""


class TerminalError(ReconcileError):
    """No retry can fix it (forbidden, rejected as invalid). Reported once, then left alone
    until something changes."""


class Forbidden(TerminalError):
    """The server refused us (401, 403). Terminal, but for one case: an API server that has
    just come back answers before its authorizer has read the RBAC objects back, and refuses
    what they allow for a moment; met during an outage, the key waits with the others."""


class ServerUnavailable(ReconcileError):
    """The API server did not answer, or asked us to slow down. Not the object's fault: it
    never counts toward giving up; the work waits until the server answers."""

    def __init__(self, message: str, subject: ObjectRef | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, subject)
        self.retry_after = retry_after


class CacheBehind(ServerUnavailable):
    """The server answered, with a conflict (or a 404) that the cache cannot explain yet: its
    watch is down (an outage, or the relist after one), so the object's newer version, often
    our own write whose answer the outage cut off, is not in it. Not the object's fault, and
    no sign of an outage: the key alone is tried again, after a short wait that grows, until
    the watch is back; it never holds other keys back nor waits for them."""

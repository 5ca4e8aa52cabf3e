#!/usr/bin/env python3
"""Mutation check: do the tests fail when the code they guard changes by one operator?

Each mutant changes one expression or statement of a module listed in TESTS below (the work
queue, the controller, the rate limiter, the event routing, the planner, the API client (kube)
and its wire (transport), and more, each named by its path under src/configmirror/, such as
controller/workqueue.py): a comparison flipped, a guard removed, a call dropped, a constant
moved by one. Then it runs the unit tests that cover that module.
A mutant the tests still pass is a "survivor": either a test is missing, or the change
makes no observable difference (an equivalent mutant), which ACCEPTED below records with
the reason. Named mutants (NAMED) add the one-line changes a reviewer asked about.

    make mutate                         # everything; exits 1 if an unexplained mutant survives
    hack/mutate.py --only controller/   # the mutants of files (or lines) matching a word:
    hack/mutate.py --only workqueue     #   a package's files, or one module's
    hack/mutate.py --only 'plan.py:(29[0-4]|43[0-9]) '   # or a regular expression
    hack/mutate.py --list               # the mutants, without running anything

It works on a copy of the tree in a temporary folder: each mutant is written there and run
by pytest in a forked child whose sys.path puts the copy first (the child checks that it
tested the copy). The files in the repo are never written, whatever happens to this script.
Mutants of operator/replicator.py, operator/caches.py and client/informer.py run an
end-to-end test too, so they need the local control plane (CONFIGMIRROR_CONTROLPLANE_ASSETS
or KUBEBUILDER_ASSETS); without it they are left out.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = Path("src/configmirror")

# The tests that cover each module, fastest and most specific first (pytest stops at the
# first failure, so most mutants die in a second).
TESTS: dict[str, list[str]] = {
    # the leaves
    "backoff.py": ["tests/unit/test_backoff.py"],
    "clock.py": ["tests/unit/test_clock.py", "tests/unit/test_workqueue.py",
                 "tests/unit/test_controller.py"],
    "allocator.py": ["tests/unit/test_allocator.py"],
    "lifecycle.py": ["tests/unit/test_lifecycle.py", "tests/unit/test_controller.py"],
    # controller/
    "controller/workqueue.py": ["tests/unit/test_workqueue.py",
                                "tests/unit/test_workqueue_metrics.py",
                                "tests/unit/test_controller.py",
                                "tests/unit/test_workqueue_model.py"],
    "controller/controller.py": ["tests/unit/test_controller.py"],
    "controller/ratelimit.py": ["tests/unit/test_ratelimit.py", "tests/unit/test_workqueue.py"],
    "controller/servergate.py": ["tests/unit/test_servergate.py"],
    # client/
    "client/tokenbucket.py": ["tests/unit/test_ratelimit.py", "tests/unit/test_kube.py"],
    "client/outage.py": ["tests/unit/test_outage.py", "tests/unit/test_events.py",
                         "tests/unit/test_servergate.py"],
    "client/events.py": ["tests/unit/test_events.py", "tests/unit/test_replicator_errors.py"],
    "client/transport.py": ["tests/unit/test_transport.py", "tests/unit/test_kube.py",
                            # the framing against h11, cut anywhere
                            "tests/unit/test_transport_h11.py"],
    "client/kube.py": ["tests/unit/test_kube.py", "tests/unit/test_transport.py"],
    "client/tokens.py": ["tests/unit/test_tokens.py"],
    # Only NAMED mutants: the store-as-held branch for the owner's own writes (OwnWrites).
    "client/informer.py": ["tests/integration/test_informer.py"],
    # replication/
    "replication/routing.py": ["tests/unit/test_routing.py"],
    "replication/plan.py": ["tests/unit/test_plan.py", "tests/unit/test_routing.py",
                            "tests/unit/test_replicator_errors.py", "tests/unit/test_secrets.py",
                            "tests/unit/test_adoption.py",
                            "tests/unit/test_plan_agrees_with_run.py"],
    "replication/adoption.py": ["tests/unit/test_adoption.py",
                                "tests/unit/test_plan_agrees_with_run.py"],
    "replication/admission.py": ["tests/unit/test_admission.py", "tests/unit/test_plan.py",
                                 "tests/unit/test_replicator.py",
                                 "tests/unit/test_plan_agrees_with_run.py"],
    "replication/status.py": ["tests/unit/test_status.py", "tests/unit/test_adoption.py"],
    "replication/clusters.py": ["tests/unit/test_clusters.py",
                                "tests/unit/test_plan_agrees_with_run.py"],
    # operator/
    "operator/memory.py": ["tests/unit/test_memory.py", "tests/unit/test_expectations.py",
                           "tests/unit/test_replicator.py",
                           "tests/unit/test_plan_agrees_with_run.py"],
    "operator/replicator.py": ["tests/unit/test_replicator.py",
                               "tests/unit/test_expectations.py",
                               "tests/unit/test_replicator_errors.py",
                               "tests/unit/test_events.py", "tests/unit/test_adoption.py",
                               "tests/unit/test_plan_agrees_with_run.py",
                               "tests/integration/test_expectations.py"],
    "operator/policy.py": ["tests/unit/test_policy.py", "tests/integration/test_policy.py"],
    "operator/probes.py": ["tests/unit/test_probes.py", "tests/unit/test_lifecycle.py"],
    "operator/caches.py": ["tests/unit/test_caches.py", "tests/integration/test_caches.py",
                           "tests/integration/test_expectations.py"],
    # cli/
    "cli/flags.py": ["tests/unit/test_flags.py"],
}
# Every file above but those with NAMED mutants only.
GENERATED = tuple(file for file in TESTS if file != "client/informer.py")

# One-line mutations asked for by name: (file, the line as it is, the line as mutated).
NAMED: list[tuple[str, str, str]] = [
    # The reconciler's memory of its own writes bypassed: it reads only the cache.
    ("operator/replicator.py", "return self._memory.expectations.view(key, self._caches.get)",
     "return self._caches.get(key)"),
    # Expectations that forget a write at once, or never hide the cache's stale version.
    ("operator/memory.py", "self._pending[obj.key] = _Expected(obj, version, exact)", "pass"),
    # The watch event of our own write: transformed and handed on as anyone's, stored as held
    # but the owner never told (its entry kept forever), or told with nothing stored.
    ("client/informer.py",
     "if own is not None and (known := own.delivered(key, version)) is not None:",
     "if False:"),
    ("client/informer.py", "own.settled(key, known)", "pass"),
    ("client/informer.py", "self.store.upsert(key, known)  # before the owner lets its entry go",
     "pass"),
    ("operator/memory.py", "elif watermark < expected.resource_version:", "elif False:"),
]

# Survivors that are equivalent (no test can tell them apart), keyed by file, the original
# line and the mutated line, with why.
_EXACT_COMMENT = " # obj is what the informer's transform makes of the stored object"
_NOTIFY_ONLY = ("the count only decides whether to notify; this one never reaches 0, so "
                "every add notifies: slower, never a lost wake-up")
_FAST_PATH = ("a fast path: _wait_for_item checks the queue, shutdown and the timeout again "
              "itself, and returns at once for a timeout of 0")
_DIGEST = ('return sys.intern(hashlib.blake2b(name.encode() + b"\\0" + blob, '
           'digest_size={}).hexdigest())')
_FROZEN = "no code assigns to a plan's fields; frozen only guards against a future one"
_LOG_ONLY = "only decides a log line"
# transport.py and kube.py (issue 24): why these survivors are equivalent.
_REST_ONCE = (
    'rest() reads a whole answer for request(), once, and the body is dropped after it: '
    'nothing reads its `left` or `ended` again')
_RECV = (
    'how many bytes one recv asks for: any size reads the same bytes, in more or fewer calls')
_FROZEN_FIELDS = (
    'no code assigns to its fields; frozen only guards against a future one')
_REPLACE = (
    "a URL's authority holds its password and the '@' after it once")
_STREAM_TIMEOUT = (
    'the connection is made with min(CONNECT_TIMEOUT, timeout) already set: they differ only '
    'for a stream asked for more than 10 s, whose head then waits 10 s instead (a test would '
    'wait 10 s)')
_POLL = (
    'select() instead of poll(): the same answer for any descriptor below FD_SETSIZE, which '
    'every socket of the tests is')
_POLL1 = (
    'waits up to 1 ms for a socket that is idle: the same answer, a millisecond later')
_DROPPED_ERROR = (
    'poll() fails only on a closed socket, and the pool never holds one (a connection is closed '
    'only once out of it)')
_RECEIVED = (
    'only whether `received` changed during a request is read, never its value')
_POS1 = (
    'the buffer is empty at that point: an offset of 1 into b"" reads as empty everywhere, and '
    'the next receive replaces it whole')
_BUFFERED_EQ = (
    'with exactly `size` bytes buffered the other branch copies the same bytes and leaves the '
    'buffer empty as this one does')
_RECV_CAP = (
    'a cap on how much one recv_into asks for: the same bytes arrive')
_CONCAT = (
    'appending to an empty remainder gives the same buffer as replacing it')
_CLOSE_TWICE = (
    "a second close finds the socket closed: shutdown's OSError is suppressed and closing twice "
    'is harmless')
_SAFE = (
    'a context naming a cluster or user the file lacks is refused either way: here, or by the '
    'official loader right after (both as ConfigError)')
_DELAY0 = (
    'waiting 0 s returns at once')
_HEADER = (
    "the official Configuration's auth_settings() holds header settings only")
_RANGE = (
    'the loop then looks at the last part twice (index -1 is the last): the same answer')
_INCLUSTER = (
    "the in-cluster branch: the service account's token and CA are files at fixed paths "
    '(/var/run/secrets/...) that a unit test cannot provide')
_BY_LENGTH = (
    "a field's name is compared with the four read here right after: skipping the others by "
    "length first spares lowering and copying them, and changes nothing read")
_RESUME = "end = _BLANK_LINE.search(buf, pos + max(scanned - 2, 0))"
_SCAN = (
    "where lines() resumes its search for the blank line: one byte earlier or later than the "
    "bytes searched already finds the same first match (a match cannot start at _pos, which "
    "the line before checks, and fill() compacts the buffer, so _pos is 0 once it has "
    "waited), and a line break at index 0 is that same case")
_SHORTCUT = (
    "the whole block's length only spares measuring its lines when none can be too long: a "
    "lower threshold measures them more often, and the lines' own limit decides")
_CRLF_WAIT = (
    "chunk_end() waiting for one byte past the chunk's CRLF: it is called when the next "
    "chunk is read, which waits for that chunk's size line anyway, and at the end of the "
    "connection both raise IncompleteRead")
ACCEPTED: dict[tuple[str, str, str], str] = {
    ("operator/policy.py", "REQUEST_TIMEOUT = 5.0", "REQUEST_TIMEOUT = 10.0"):
        "how long one request of the publisher may take: the tests' server answers at once, "
        "so only a server that never answers could tell",
    ("operator/policy.py", "@dataclass(frozen=True)", "@dataclass(frozen=False)"): _FROZEN_FIELDS,
    ("client/outage.py", "if self._since is None:", "if False:"):
        "answered()'s unlocked fast path, and its re-check under the lock: outside an outage "
        "the locked path returns as well; the re-check matters only to a second answer that "
        "passed the fast path while the first was ending the outage (a race no test can order "
        "without reaching into the lock)",
    ("client/outage.py", "self._ended = 0", "self._ended = 1"):
        "a mark is compared with the count later only for a change, never for its value",
    ("client/events.py",
     "self._unanswered = False # the last write got no answer at all (an outage)",
     "self._unanswered = True # the last write got no answer at all (an outage)"):
        "its first reader, a retry's wait, comes after a failed write, which sets it",
    ("clock.py", "left = max(until - time.monotonic(), 0.0)",
     "left = max(until - time.monotonic(), 1.0)"):
        "the real clock then wakes a getter up to 1 s late: visible in wall-clock time only, "
        "which the tests do not bound (the fake clock's waits are tested exactly)",
    ("clock.py", "left = max(until - time.monotonic(), 0.0)",
     "left = min(until - time.monotonic(), 0.0)"):
        "waits 0 s at a time until the item is due: the same result for a busy loop's CPU, "
        "visible in wall-clock time only",
    ("controller/servergate.py",
     "if first:", "if False:"): _LOG_ONLY + " (the outage's first warning)",
    ("controller/controller.py", "self.queue.shutdown()", "pass"):
        "shutdown_with_drain() already shut the queue down; this only clears its draining "
        "flag, which nothing waits on once the drain has returned",
    ("controller/servergate.py", "probing = False", "probing = True"):
        "outside an outage a probe only calls answered(), which returns at once when there "
        "is none; in an outage the locked block below sets it",
    ("controller/servergate.py", "if self._outage_since is None:", "if False:"):
        "outside an outage the rest is a no-op but for an info log line",
    ("operator/memory.py",
     "if key not in self._pending: # nothing of ours in flight there (an atomic lookup)",
     "if False: # nothing of ours in flight there (an atomic lookup)"):
        "a fast path: the locked path below returns the cached object too when nothing of ours "
        "is pending",
    ("operator/memory.py",
     "exact: bool = False" + _EXACT_COMMENT, "exact: bool = True" + _EXACT_COMMENT):
        "only a delete's entry takes the default (a write passes exact itself), and its obj is "
        "None, which delivered() returns as 'not ours' either way",
    ("operator/memory.py", "if expected is None or not expected.exact:", "if False:"):
        "delivered()'s unlocked fast path: the same check is made again under the lock, which "
        "returns None for the same entries",
    ("operator/memory.py", "if expected is None:", "if False:"):
        "the re-check under the lock: only an echo or another view that took the entry between "
        "the unlocked check and the lock reaches it (a race no test can order without reaching "
        "into the lock)",
    ("controller/servergate.py", "if since is None:", "if False:"):
        "the re-check under the lock: only a second answered() that passed the unlocked check "
        "while the first was ending the outage reaches it (a race no test can order without "
        "reaching into the lock)",
    ("replication/plan.py", "@dataclass(frozen=True)", "@dataclass(frozen=False)"): _FROZEN,
    ("operator/replicator.py",
     "if as_written and not carried: # the common case: a few comparisons, no hashing",
     "if False: # the common case: a few comparisons, no hashing"):
        "a fast path: the general one makes the same expectation of the answer (its digest is "
        "the source's when kept as written) and, with no mark carried or needed, no patch",
    ("replication/admission.py",
     _DIGEST.format(8), _DIGEST.format(9)):
        "the size of a field's digest: the source's and the replica's are made alike, so any "
        "size compares the same (8 bytes: two of one replica's few fields collide at 2^-64)",
    ("replication/status.py",
     "@dataclass(frozen=True)", "@dataclass(frozen=False)"): _FROZEN_FIELDS,
    # A Member is never hashed either way (its labels are a dict); a new one is made by replace().
    ("replication/clusters.py",
     "@dataclass(frozen=True)", "@dataclass(frozen=False)"): _FROZEN_FIELDS,
    ("operator/caches.py", "@dataclass(frozen=True)", "@dataclass(frozen=False)"): _FROZEN_FIELDS,
    ("cli/flags.py", "@dataclass(frozen=True)", "@dataclass(frozen=False)"): _FROZEN_FIELDS,
    ("replication/adoption.py", "@dataclass(frozen=True, slots=True)",
     "@dataclass(frozen=False, slots=True)"): _FROZEN_FIELDS,
    ("replication/adoption.py", "@dataclass(frozen=True, slots=True)",
     "@dataclass(frozen=True, slots=False)"):
        "slots only saves memory (a Mirror is a rare object's); nothing reads its __dict__",
    ("operator/caches.py",
     'return self._informers.get(key.rsplit("/", 1)[-1]) or self._informers.get("")',
     'return self._informers.get(key.rsplit("/", 2)[-1]) or self._informers.get("")'):
        "an object's key is namespace/name, and neither holds a '/': one split or two give "
        "the same name",
    ("operator/replicator.py", "if plan.invalid is not None:", "if False:"):
        "an invalid source's plan has no action, conflict or puller, so the rest returns the "
        "same Result(); a removal pending for one of its replicas is then called off at once "
        "instead of at that target's reconcile, whose decision (a typo changes nothing) calls "
        "it off too",
    ("operator/replicator.py", "if source is None:", "if False:"):
        "a plan names a problem (invalid, not allowed) only for a source it found: no caller "
        "passes None with a problem",
    ("operator/replicator.py",
     'done = "nothing is changed" if reason == "InvalidSpec" else "it is not replicated"',
     'done = "nothing is changed" if (reason != \'InvalidSpec\') else "it is not replicated"'):
        _LOG_ONLY,
    ("operator/replicator.py", "self._memory.problems.forget(key.object_key)", "pass"):
        "memory only: a problem comes back only with a new version of the source (InvalidSpec) "
        "or of its namespace (SourceNotAllowed), and what is remembered holds both versions, "
        "so it is reported again either way",
    ("replication/plan.py", "return cls(seconds, 0.0, lambda key: None)",
     "return cls(seconds, 1.0, lambda key: None)"):
        "with no cause ever seen, every removal's time left is the whole grace whatever `now` "
        "is (due_in = now + seconds - now)",
    ("client/events.py", "@dataclass(frozen=True)", "@dataclass(frozen=False)"):
        "no code assigns to an ObjectRef's or a queued Event's fields; frozen only guards "
        "against a future one",
    ("client/events.py", "self._dropping = False", "self._dropping = True"):
        "the first value is never read: the first Event put into the (empty) queue always "
        "fits and sets it to False, so only a queue of size 0 could tell",
    ("client/tokenbucket.py", "return 0.0 if self._tokens >= 0 else -self._tokens / self._qps",
     "return 0.0 if (self._tokens > 0) else -self._tokens / self._qps"):
        "at exactly 0 tokens it returns -0.0, which equals 0.0",
    ("controller/workqueue.py", "self._draining = False", "self._draining = True"):
        "done() then notifies the drain condition with no drain waiting; shutdown() and "
        "shutdown_with_drain() set the flag before anyone waits",
    ("controller/workqueue.py",
     "if not self._queue and timeout != 0.0 and not self._shutting_down:",
     "if (not self._queue or timeout != 0.0 or (not self._shutting_down)):"): _FAST_PATH,
    ("controller/workqueue.py",
     "if not self._queue and timeout != 0.0 and not self._shutting_down:",
     "if not self._queue and timeout != 1.0 and not self._shutting_down:"): _FAST_PATH,
    ("controller/workqueue.py", "if not self._processing and self._draining:",
     "if (not self._processing or self._draining):"):
        "an extra notify of the drain condition; the drain re-checks its predicate",
    ("controller/workqueue.py", "if delay > 0:", "if (delay >= 0):"):
        "a zero delay then goes through add_after(), which adds at once and counts "
        "workqueue_retries_total; the operator's limiter never returns 0 (5 ms minimum). "
        "client-go counts every rate-limited retry, so the mutant is arguably closer to it",
    ("controller/workqueue.py", "if current is not None and current <= ready_at:",
     "if current is not None and (current < ready_at):"):
        "an equal time pushes a second heap entry, which _promote_ready() skips",
    ("controller/workqueue.py", "if wait is not None and wait <= 0:",
     "if wait is not None and (wait < 0):"):
        "with exactly 0 s left it waits 0 s and returns on the next pass",
    ("controller/workqueue.py", "self._getters -= 1", "self._getters += 1"): _NOTIFY_ONLY,
    ("controller/workqueue.py", "self._heap.clear()", "pass"):
        "after shutdown no entry is ever promoted: _waiting is cleared and adds are refused; "
        "only memory",
    # -- transport.py and kube.py (issue 24) --
    ("client/transport.py", "data, self.left, self.ended = reader.exactly(self.left), 0, True",
     "data, self.left, self.ended = reader.exactly(self.left), 0, False"): _REST_ONCE,
    ("client/transport.py", "data, self.left, self.ended = reader.exactly(self.left), 0, True",
     "data, self.left, self.ended = reader.exactly(self.left), 1, True"): _REST_ONCE,
    ("operator/probes.py", "POLL_INTERVAL = 0.2 # how soon a server's thread sees stop()",
     "POLL_INTERVAL = 0.4 # how soon a server's thread sees stop()"):
        "how soon the serving loop sees a stop: any fraction of a second well inside the "
        "shutdown's margin serves; no behaviour depends on its value",
    ("client/kube.py", "for attempt in range(1, RETRY_AFTER_ATTEMPTS + 1):",
     "for attempt in range(1, RETRY_AFTER_ATTEMPTS + 2):"):
        "the loop raises at attempt RETRY_AFTER_ATTEMPTS, before a fourth could begin",
    ("client/transport.py",
     'if lines and min(lines)[:1] <= b" " and any(line[:1] in (b" ", b"\\t") for line in lines):',
     "if lines and min(lines)[:1] <= b\" \" and any((line[:1] not in (b' ', b'\\t')) for line in "
     "lines):"):
        "the two tests before _unfolded only spare its call: on lines none of which is folded "
        "it returns them as they are, and a first line that starts with a blank is refused "
        "either way",
    ("client/transport.py", "if colon not in _WANTED_LENGTHS: # most fields: not one read here "
     "(nothing copied)", "if False: # most fields: not one read here (nothing copied)"):
        _BY_LENGTH,
    ("client/transport.py",
     "scanned = 0 # bytes after _pos searched for the blank line (and counted)",
     "scanned = 1 # bytes after _pos searched for the blank line (and counted)"): _SCAN,
    ("client/transport.py",
     _RESUME, "end = _BLANK_LINE.search(buf, (pos - max(scanned - 2, 0)))"): _SCAN,
    ("client/transport.py",
     _RESUME, "end = _BLANK_LINE.search(buf, pos + max(scanned - 2, 1))"): _SCAN,
    ("client/transport.py",
     _RESUME, "end = _BLANK_LINE.search(buf, pos + max(scanned - 3, 0))"): _SCAN,
    ("client/transport.py", "if len(block) > MAX_LINE - 2 and max(map(len, lines)) > MAX_LINE - 2:",
     "if (len(block) >= MAX_LINE - 2) and max(map(len, lines)) > MAX_LINE - 2:"): _SHORTCUT,
    ("client/transport.py", "if len(block) > MAX_LINE - 2 and max(map(len, lines)) > MAX_LINE - 2:",
     "if len(block) > MAX_LINE - 3 and max(map(len, lines)) > MAX_LINE - 2:"): _SHORTCUT,
    ("client/transport.py", 'eol = buf.find(b"\\r\\n", pos + max(scanned - 1, 0))',
     'eol = buf.find(b"\\r\\n", pos + max(scanned - 2, 0))'):
        "where chunk_size() resumes its search for the CRLF: one byte earlier than the bytes "
        "searched already finds the same first CRLF (one starting there would have been found)",
    ("client/transport.py",
     "while self.buffered() < 2:", "while (self.buffered() <= 2):"): _CRLF_WAIT,
    ("client/transport.py", "while self.buffered() < 2:", "while self.buffered() < 3:"): _CRLF_WAIT,
    ("client/transport.py", "if last >= 0:", "if (last > 0):"): _SCAN,
    ("client/transport.py", "if last >= 0:", "if last >= 1:"): _SCAN,
    ("client/transport.py", "self._pos = 0 # bytes of _buf already consumed",
     "self._pos = 1 # bytes of _buf already consumed"):
        _POS1,
    ("client/transport.py", "if parts.password is None:", "if False:"):
        "without a password the replace below finds ':None@' nowhere and returns the URL "
        "unchanged, as the guard does",
    ('client/transport.py',
     '_RECV = 65536 # bytes asked of one recv: a whole answer to a write in one call',
     '_RECV = 65537 # bytes asked of one recv: a whole answer to a write in one call'):
        _RECV,
    ('client/transport.py',
     '@dataclass(frozen=True)',
     '@dataclass(frozen=False)'):
        _FROZEN_FIELDS,
    ('client/transport.py',
     'return url.replace(f":{parts.password}@", ":***@", 1)',
     'return url.replace(f":{parts.password}@", ":***@", 2)'):
        _REPLACE,
    ('client/transport.py',
     'conn.sock.settimeout(timeout)',
     'pass'):
        _STREAM_TIMEOUT,
    ('client/transport.py',
     'if hasattr(select, "poll"): # no FD_SETSIZE limit (select() has one)',
     'if False: # no FD_SETSIZE limit (select() has one)'):
        _POLL,
    ('client/transport.py',
     'return bool(poller.poll(0))',
     'return bool(poller.poll(1))'):
        _POLL1,
    ('client/transport.py',
     'readable, _, _ = select.select([self.sock], [], [], 0)',
     'readable, _, _ = select.select([self.sock], [], [], 1)'):
        _POLL1,
    ('client/transport.py',
     'return True',
     'return False'):
        _DROPPED_ERROR,
    ('client/transport.py',
     'self.received = 0 # bytes received so far',
     'self.received = 1 # bytes received so far'):
        _RECEIVED,
    ('client/transport.py',
     'self.received += count',
     'self.received -= count'):
        _RECEIVED,
    ('client/transport.py',
     'self.received += len(data)',
     'self.received -= len(data)'):
        _RECEIVED,
    ('client/transport.py',
     'self._buf, self._pos = b"", 0',
     'self._buf, self._pos = b"", 1'):
        _POS1,
    ('client/transport.py',
     'if buffered >= size:',
     'if (buffered > size):'):
        _BUFFERED_EQ,
    ('client/transport.py',
     'count = self._sock.recv_into(view[got:], min(size - got, 1 << 20))',
     'count = self._sock.recv_into(view[got:], min(size - got, 1 << 21))'):
        _RECV_CAP,
    ('client/transport.py',
     'count = self._sock.recv_into(view[got:], min(size - got, 1 << 20))',
     'count = self._sock.recv_into(view[got:], min(size - got, 2 << 20))'):
        _RECV_CAP,
    ('client/transport.py',
     'if self._pos == len(self._buf):',
     'if False:'):
        _CONCAT,
    ('client/transport.py',
     'if self._closed:',
     'if False:'):
        _CLOSE_TWICE,
    ('client/transport.py',
     'self._closed = True',
     'self._closed = False'):
        _CLOSE_TWICE,
    ('client/kube.py',
     '@dataclass(frozen=True)',
     '@dataclass(frozen=False)'):
        _FROZEN_FIELDS,
    ('client/kube.py',
     'cluster = config["clusters"].get_with_name(cluster_name, safe=True)',
     'cluster = config["clusters"].get_with_name(cluster_name, safe=False)'):
        _SAFE,
    ('client/kube.py',
     'user = config["users"].get_with_name(user_name, safe=True) if user_name else None',
     'user = config["users"].get_with_name(user_name, safe=False) if user_name else None'):
        _SAFE,
    ('client/kube.py',
     'if selected is None:',
     'if False:'):
        _INCLUSTER,
    ('client/kube.py',
     'if delay > 0:',
     'if (delay >= 0):'):
        _DELAY0,
    ('client/kube.py',
     'if setting["in"] == "header" and setting["value"]:',
     "if (setting['in'] == 'header' or setting['value']):"):
        _HEADER,
    ('client/kube.py',
     'for i in range(len(parts) - 1, -1, -1):',
     'for i in range(len(parts) - 1, -2, -1):'):
        _RANGE,
}


@dataclass(frozen=True)
class Mutant:
    file: str        # under src/configmirror
    line: int        # 1-based, of the first line changed
    before: str      # the original line(s), stripped
    after: str       # the mutated line(s), stripped
    what: str        # a short description
    source: str      # the whole mutated file

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line} {self.what}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file, self.before, self.after)


# -- generating mutants ------------------------------------------------------------------------

_SWAP_CMP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_SWAP_BIN: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.Pow: ast.Mult,
}


def _skipped(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Logging, docstrings, asserts, annotations and argument defaults are not mutated."""
    if isinstance(node, ast.Expr) and _is_log(node.value):
        return True
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Assert):
            return True
        if isinstance(parent, ast.arguments):
            return True  # a default value
        if isinstance(parent, (ast.AnnAssign, ast.arg)) and node is parent.annotation:
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is parent.returns:
            return True
        if _is_log(parent):
            return True
        node = parent
    return False


def _is_log(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        isinstance(node.func.value, ast.Name) and node.func.value.id == "log"


def _variants(node: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Mutated copies of `node` (an expression or a statement), each with a description."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _SWAP_CMP:
        new = copy.deepcopy(node)
        new.ops = [_SWAP_CMP[type(node.ops[0])]()]
        yield new, "comparison flipped"
    elif isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield new, "and/or swapped"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield copy.deepcopy(node.operand), "`not` dropped"
    elif isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BIN:
        new = copy.deepcopy(node)
        new.op = _SWAP_BIN[type(node.op)]()
        yield new, "arithmetic operator swapped"
    elif isinstance(node, ast.AugAssign) and type(node.op) in (ast.Add, ast.Sub):
        new = copy.deepcopy(node)
        new.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        yield new, "+=/-= swapped"
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield ast.Constant(not node.value), "boolean constant flipped"
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield ast.Constant(node.value + 1), "integer constant + 1"
    elif isinstance(node, ast.Constant) and type(node.value) is float:
        yield ast.Constant(node.value * 2 if node.value else 1.0), "float constant changed"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in ("min", "max"):
        new = copy.deepcopy(node)
        new.func = ast.Name("max" if node.func.id == "min" else "min", ast.Load())
        yield new, "min/max swapped"
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield ast.Pass(), "call dropped"
    elif isinstance(node, ast.If):
        new_test = ast.Constant(False)
        yield new_test, "guard removed (if False)"
    elif isinstance(node, (ast.Continue, ast.Break)):
        yield ast.Pass(), f"`{type(node).__name__.lower()}` dropped"


def _splice(text: str, lines: list[str], node: ast.AST, replacement: str) -> str:
    """`text` with `node`'s source segment replaced (offsets are UTF-8 byte columns)."""
    start, end = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
    first, last = lines[start].encode(), lines[end].encode()
    head = first[:node.col_offset].decode()  # type: ignore[attr-defined]
    tail = last[node.end_col_offset:].decode()  # type: ignore[attr-defined]
    return "".join(lines[:start]) + head + replacement + tail + "".join(lines[end + 1:])


def generated_mutants(file: str, text: str) -> Iterator[Mutant]:
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    docstrings = {id(body[0]) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and (body := n.body) and isinstance(body[0], ast.Expr)
                  and isinstance(body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if id(node) in docstrings or not hasattr(node, "lineno") or _skipped(node, parents):
            continue
        if "pragma: no mutate" in lines[node.lineno - 1]:
            continue
        for new, what in _variants(node):
            target: ast.AST = node.test if isinstance(node, ast.If) else node
            replacement = ast.unparse(new)
            if isinstance(node, ast.If):
                mutated = _splice(text, lines, target, replacement)
            elif isinstance(node, ast.stmt):
                mutated = _splice(text, lines, node, replacement)
            else:
                mutated = _splice(text, lines, node, f"({replacement})"
                                  if isinstance(new, (ast.BoolOp, ast.Compare, ast.BinOp))
                                  else replacement)
            try:
                ast.parse(mutated)
            except SyntaxError:
                continue
            before = "".join(lines[target.lineno - 1:target.end_lineno]).strip()  # type: ignore[attr-defined]
            after_lines = mutated.splitlines()
            span = target.end_lineno - target.lineno  # type: ignore[attr-defined]
            changed = len(after_lines) - len(lines) + span
            after = "\n".join(after_lines[target.lineno - 1:target.lineno + changed]).strip()
            yield Mutant(file, target.lineno, " ".join(before.split()),
                         " ".join(after.split()), what, mutated)


def named_mutants(file: str, text: str) -> Iterator[Mutant]:
    lines = text.splitlines(keepends=True)
    for named_file, before, after in NAMED:
        if named_file != file:
            continue
        found = [i for i, line in enumerate(lines) if line.strip() == before]
        if len(found) != 1:
            raise SystemExit(f"mutate: {file}: expected one line `{before}`, found {len(found)}")
        i = found[0]
        indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        mutated = "".join(lines[:i]) + indent + after + "\n" + "".join(lines[i + 1:])
        yield Mutant(file, i + 1, before, after, "named mutation", mutated)


def all_mutants(files: list[str]) -> list[Mutant]:
    mutants: list[Mutant] = []
    for file in files:
        text = (REPO / SRC / file).read_text()
        if file in GENERATED:
            mutants.extend(generated_mutants(file, text))
        mutants.extend(named_mutants(file, text))
    return sorted(mutants, key=lambda m: (m.file, m.line, m.what, m.after))


# -- running them ----------------------------------------------------------------------------

# Imported once here, before any fork, so each mutant's run pays only for configmirror and the
# tests. configmirror itself must not be imported here: each child imports its own copy.
PRELOAD = ("pytest", "pytest_mock", "pytest_timeout", "hypothesis", "kubernetes",
           "prometheus_client", "urllib3", "yaml")


# A child's exit code pytest never uses (its own are 0-5; 4, a usage error, is also what a
# mutant that breaks an import of conftest's gets, and that mutant is killed).
OUTSIDE = 99


class Workspace:
    """A copy of the tree (src, testing, tests, pyproject.toml) whose configmirror the tests
    import; a mutant is written there and the pristine file put back after each run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for part in ("src", "testing", "tests"):
            shutil.copytree(REPO / part, root / part,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
        self.log = root / "pytest.log"
        self._pristine = {f: (root / SRC / f).read_text() for f in TESTS}

    def start(self, mutant: Mutant | None, file: str, timeout: float) -> int:
        """Fork a child that runs `file`'s tests against `mutant` (None: unmutated)."""
        path = self.root / SRC / file
        if mutant is not None:
            path.write_text(mutant.source)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 3
            try:
                code = self._child(TESTS[file], timeout)
            finally:
                os._exit(code)
        return pid

    def restore(self, file: str) -> None:
        (self.root / SRC / file).write_text(self._pristine[file])

    def _child(self, tests: list[str], timeout: float) -> int:
        os.chdir(self.root)
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        # No bytecode: a cached mutant could be loaded for the restored file (same size,
        # same second), and the other way round.
        sys.dont_write_bytecode = True
        sys.path[:0] = [str(self.root / "src"), str(self.root / "testing"), str(self.root)]
        os.environ.pop("CI", None)  # a missing control plane must skip, not count as a kill
        # No examples remembered from the last mutant: each run starts from the same seed.
        shutil.rmtree(self.root / ".hypothesis", ignore_errors=True)
        import pytest

        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0",
                            "-o", f"timeout={int(timeout)}", *tests])
        sys.stdout.flush()
        sys.stderr.flush()
        import configmirror
        if not Path(configmirror.__file__).resolve().is_relative_to(self.root.resolve()):
            return OUTSIDE  # tested some other configmirror: say so, count nothing
        return int(code)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def outcome_of(status: int, output: str) -> str:
    """'passed' | 'skipped' | 'failed' | 'timeout' from a child's wait status and output."""
    if os.WIFSIGNALED(status):
        return "timeout"  # killed by us at its deadline
    code = os.WEXITSTATUS(status)
    if code == OUTSIDE:
        raise SystemExit("mutate: a child imported configmirror from outside its copy")
    if code == 0:
        last = output.strip().splitlines()[-1] if output.strip() else ""
        return "skipped" if "skipped" in last else "passed"
    return "timeout" if "+ Timeout +" in output else "failed"


def run_all(spaces: list[Workspace], jobs: list[tuple[Mutant | None, str]],
            timeouts: dict[str, float]) -> Iterator[tuple[Mutant | None, str, str, float]]:
    """Run each (mutant, file) in a forked child, one per free workspace; yield
    (mutant, file, outcome, seconds) as they end. Files are restored after every run."""
    pending = list(reversed(jobs))
    running: dict[int, tuple[Workspace, Mutant | None, str, float]] = {}
    free = list(spaces)
    try:
        while pending or running:
            while pending and free:
                mutant, file = pending.pop()
                space = free.pop()
                pid = space.start(mutant, file, timeouts.get(file, 600))
                running[pid] = (space, mutant, file, time.monotonic())
            time.sleep(0.05)  # polling children; nothing here waits for a condition
            for pid, (space, mutant, file, started) in list(running.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                took = time.monotonic() - started
                if done == 0:
                    if took < timeouts.get(file, 600) + 30:
                        continue
                    os.kill(pid, signal.SIGKILL)
                    _, status = os.waitpid(pid, 0)
                del running[pid]
                space.restore(file)
                free.append(space)
                yield mutant, file, outcome_of(status, space.output()), took
    finally:
        for pid, (space, _, file, _) in running.items():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            space.restore(file)


def control_plane_available() -> bool:
    return any(os.environ.get(v) for v in ("CONFIGMIRROR_CONTROLPLANE_ASSETS",
                                           "KUBEBUILDER_ASSETS"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run mutants whose name matches this "
                        "regular expression (a word: whose name contains it), such as "
                        "'transport.py:(44[4-9]|45) ' for the mutants of some lines")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    args = parser.parse_args()
    # SIGTERM (a CI timeout, kill) ends in the finally blocks: children killed, copy removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    files = list(TESTS)
    if not control_plane_available():
        for needs_one in ("operator/replicator.py", "operator/caches.py", "client/informer.py"):
            files.remove(needs_one)
        print("mutate: no control plane (CONFIGMIRROR_CONTROLPLANE_ASSETS): the mutants of "
              "operator/replicator.py, operator/caches.py and client/informer.py are left out")
    mutants = [m for m in all_mutants(files) if re.search(args.only, m.name)]
    if args.list:
        for m in mutants:
            print(f"{m.name}\n    - {m.before}\n    + {m.after}")
        print(f"{len(mutants)} mutants")
        return 0

    for module in PRELOAD:
        __import__(module)
    assert not any(name.split(".")[0] in ("configmirror", "configmirror_testing", "tests")
                   for name in sys.modules), "configmirror must be imported by the children only"
    results: list[tuple[Mutant, str]] = []
    with tempfile.TemporaryDirectory(prefix="configmirror-mutate-") as tmp:
        spaces = [Workspace(Path(tmp) / f"w{i}") for i in range(max(args.jobs, 1))]
        files_used = sorted({m.file for m in mutants})
        timeouts: dict[str, float] = {}
        for _, file, outcome, took in run_all(spaces, [(None, f) for f in files_used], {}):
            if outcome != "passed":
                print(spaces[0].output()[-3000:])
                raise SystemExit(f"mutate: the tests of {file} do not pass unmutated "
                                 f"({outcome}): fix that first")
            timeouts[file] = max(30.0, 5 * took)
        print(f"mutate: {len(mutants)} mutants; the tests pass unmutated", flush=True)
        for mutant, _, outcome, took in run_all(spaces, [(m, m.file) for m in mutants],
                                                timeouts):
            assert mutant is not None
            killed = outcome in ("failed", "timeout")
            mark = "killed" if killed else "ACCEPTED" if mutant.key in ACCEPTED else "SURVIVED"
            print(f"{mark:9} {mutant.name} [{took:.1f} s]"
                  + (" (timeout)" if outcome == "timeout" else ""), flush=True)
            results.append((mutant, outcome))

    results.sort(key=lambda r: (r[0].file, r[0].line))
    killed = [m for m, o in results if o in ("failed", "timeout")]
    survivors = [m for m, o in results if o not in ("failed", "timeout")]
    unexplained = [m for m in survivors if m.key not in ACCEPTED]
    print(f"\nmutation score: {len(killed)} killed / {len(results)} mutants"
          f" ({len(survivors) - len(unexplained)} equivalent survivors accepted)")
    for m in survivors:
        why = ACCEPTED.get(m.key)
        print(f"\n{'accepted' if why else 'SURVIVED'}: {m.name}\n    - {m.before}\n"
              f"    + {m.after}" + (f"\n    why: {why}" if why else ""))
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())

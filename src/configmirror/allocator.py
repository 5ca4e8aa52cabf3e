"""The C allocator's setting for a long-running operator process.

glibc serves a block of at least its mmap threshold (128 KiB to start) with mmap, and gives
it back to the system when it is freed; but it raises the threshold to the size of each such
block freed (up to 32 MiB). After the first list page's buffer is freed, every later page
(about 650 KB for 500 ConfigMaps) is cut out of a thread's heap instead, which keeps it once
freed. A relist of 100,000 replicas left the process 30-40 MiB larger than the same cache
built from its own writes, and each resync added more (docs/hot-path.md). Fixing the
threshold at glibc's own starting value turns that adjustment off and undoes a raise made
before it (by the imports): large blocks are mmapped and returned as before the first one was
freed; small blocks are not affected.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024  # glibc's starting value, kept


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes, with no dynamic raise. False, and
    nothing changed, where the C library is not glibc (musl, macOS) or the environment sets
    the threshold already (MALLOC_MMAP_THRESHOLD_, or GLIBC_TUNABLES' mmap_threshold)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or \
            "glibc.malloc.mmap_threshold" in os.environ.get("GLIBC_TUNABLES", ""):
        return False  # the user's choice, which glibc applied at start
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))

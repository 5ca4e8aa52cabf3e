"""glibc's mmap threshold, fixed for `run` (configmirror.allocator): a block of a list page's
size is mmapped, and so given back when freed, even after a larger block was freed. Each case
runs in a process of its own, since the setting is the whole process's."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from configmirror.allocator import fix_mmap_threshold

# Frees an 8 MiB block (glibc then raises its threshold past it, unless fixed), takes a block
# of a list page's size, and prints what fix_mmap_threshold said and how much more glibc holds
# in mmapped blocks (mallinfo2's hblkhd) while it is held.
PAGE = 650_000
SCRIPT = f"""
import ctypes, sys
from configmirror.allocator import fix_mmap_threshold

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else None
libc.free(libc.malloc(8 << 20))
before = libc.mallinfo2().hblkhd
page = libc.malloc({PAGE})
print(fixed, libc.mallinfo2().hblkhd - before)
"""

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="glibc's allocator only (the image's and CI's)")


def mmapped_after_a_large_free(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True,
                          text=True, timeout=60, check=True, env={"PATH": "", **env})
    said, grown = done.stdout.split()
    return said, int(grown)


def test_a_page_sized_block_is_mmapped_after_a_larger_one_was_freed() -> None:
    assert mmapped_after_a_large_free("fixed") == ("True", pytest.approx(PAGE, abs=8192))


def test_without_it_glibc_serves_that_block_from_its_heap() -> None:
    """What the fix is for: glibc's own behaviour, which this test would stop showing if a
    glibc release changed it (and the fix were no longer needed)."""
    assert mmapped_after_a_large_free("default") == ("None", 0)


def test_a_threshold_the_environment_sets_is_left_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert fix_mmap_threshold() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=1")
    assert fix_mmap_threshold() is False

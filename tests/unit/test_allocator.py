"""glibc's mmap threshold, fixed for `run` (configmirror.allocator): a block of a list page's
size is mmapped, and so given back when freed, even after a larger block was freed. Each case
runs in a process of its own, since the setting is the whole process's."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_mock import MockerFixture

import configmirror.allocator
from configmirror.allocator import fix_mmap_threshold

# Frees an 8 MiB block (glibc then raises its threshold past it), fixes the threshold (or not),
# frees another 8 MiB block (which raises it again, unless fixed), takes a block of the size
# asked, and prints what fix_mmap_threshold said and how much more glibc holds in
# mmapped blocks (mallinfo2's hblkhd) while it is held.
PAGE = 650_000  # a list page's buffer: 500 ConfigMaps
KIB = 1024
SCRIPT = """
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
libc.free(libc.malloc(8 << 20))  # before the fix, as the imports before `run` may
fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else None
libc.free(libc.malloc(8 << 20))  # and after it, as a relist does
before = libc.mallinfo2().hblkhd
block = libc.malloc(int(sys.argv[2]))
print(fixed, libc.mallinfo2().hblkhd - before)
"""

# glibc's own behaviour, shown in a process of its own; the image's and CI's libc. Elsewhere
# the fix does nothing, which the tests with a libc named for them below show anywhere.
glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="glibc's allocator only (the image's and CI's)")


def mmapped_after_a_large_free(mode: str, size: int = PAGE) -> tuple[str, int]:
    """(what fix_mmap_threshold said, the bytes glibc mmapped for a block of `size`), in a
    process of its own that imports this configmirror (the one under test, wherever it is)."""
    tree = Path(configmirror.allocator.__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(size)], capture_output=True,
                          text=True, timeout=60, check=True,
                          env={"PATH": "", "PYTHONPATH": str(tree)})
    said, grown = done.stdout.split()
    return said, int(grown)


@glibc_only
def test_a_page_sized_block_is_mmapped_after_a_larger_one_was_freed() -> None:
    assert mmapped_after_a_large_free("fixed") == ("True", pytest.approx(PAGE, abs=8192))


@glibc_only
def test_the_threshold_is_glibcs_own_starting_128_kib() -> None:
    """From 128 KiB up a block is mmapped; below it, it comes from the heap as before."""
    assert mmapped_after_a_large_free("fixed", 128 * KIB) == \
        ("True", pytest.approx(128 * KIB, abs=8192))
    assert mmapped_after_a_large_free("fixed", 127 * KIB) == ("True", 0)


@glibc_only
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


def test_nothing_is_changed_where_the_c_library_is_not_glibc(mocker: MockerFixture) -> None:
    mocker.patch("platform.libc_ver", return_value=("", ""))  # musl, macOS
    cdll = mocker.patch("ctypes.CDLL")
    assert fix_mmap_threshold() is False
    cdll.assert_not_called()


def test_nothing_is_changed_where_glibc_has_no_mallopt(mocker: MockerFixture) -> None:
    mocker.patch("platform.libc_ver", return_value=("glibc", "2.36"))
    mocker.patch("ctypes.CDLL", side_effect=OSError("no such library"))
    assert fix_mmap_threshold() is False

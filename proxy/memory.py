"""Giving freed memory back to the system, once a minute.

A burst (a storm of connections, a broker paused while clients queue requests, a batch of bad
frames) allocates and frees megabytes at once. glibc's allocator keeps what was freed in its
heap for the next burst, so the process's resident size steps up at each one and never comes
down, and a sidecar that runs for months looks like it leaks. ``malloc_trim(0)`` returns the
free pages of every heap to the system. It costs ~20 µs when there is nothing to give back
and a few ms when a burst left tens of MB (8.5 ms for 90 MB here), so the proxy's tick calls it
once a minute (``tests/proxy/test_memory.py``).
On a libc without it (musl, macOS) this does nothing.

The trace writer's Arrow buffers come from glibc too (``proxy/traces.py``: ``use_system_pool``),
so the same trim reaches them. Arrow's own default in the pyarrow wheels, mimalloc, keeps freed
segments the same way and ``malloc_trim`` does not reach them: measured here, 200 tables built
and dropped left 220 MB resident until ``release_unused()`` (1 µs when there is nothing to give
back, 0.4 ms for 80 MB). So the same once-a-minute call asks Arrow's pool too, whichever it is
(``ARROW_DEFAULT_MEMORY_POOL`` may choose another), when pyarrow is loaded (traces on); this
module never loads it.

Python's collector is the other source of pauses: a full collection walks every tracked object,
and a proxy that has loaded its codec, pyarrow and prometheus_client holds ~48 000 of them before
its first client. Walking them took 16-27 ms here (a stall of the event loop each time one came
due) and found nothing to free: they live as long as the process. ``settle_heap`` moves them,
once the proxy is up, to the permanent generation the collector never walks (``gc.freeze``);
afterwards a full collection walks only what the traffic made. ``python_gc_collections_total``
(``metrics/prom.py``) counts the collections per generation.

When the resident size rises, ``HeapSizes`` (``metrics/prom.py``) says whose it is: ``fetchlat_python_allocated_blocks``
(the interpreter's live memory blocks: objects, and buffers Python allocated),
``fetchlat_arrow_allocated_bytes`` (what Arrow's pool holds for the trace writer) and
``fetchlat_libc_heap_bytes{state}`` (what glibc's allocator holds in use, and free but kept). RSS rising
while both stay flat is an allocator keeping pages it was given back, not something held; a
count that rises with it is something held, and ``fetchlat_held_entries`` says which structure.
When none of those does, ``census`` (``kill -USR1`` a proxy: it logs one) counts the objects the
collector tracks by type, leaving out those frozen at start: two censuses an hour apart name
what grew. What the collector does not track (strings, bytes, ints: the keys and values a
container holds) shows only in the memory blocks; a proxy started with Python's own
``PYTHONTRACEMALLOC=N`` (N frames per allocation; it slows every allocation, so for a hunt, not
for months) adds to each census the source lines whose live allocations grew most since its
first census (``tracemalloc``), which names the container's filler too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
import re
import sys
import tempfile
import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

RELEASE_EVERY_S = 60.0
M_ARENA_MAX = -8  # mallopt's parameter (malloc.h): how many arenas glibc may make
CENSUS_TOP = 25  # the types a census lists, the most numerous first


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, found and loaded once (``find_library`` asks ``ldconfig``: ms each time)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def libc_fn(name: str) -> Any | None:
    """A function of the C library by name, or None where it is not there (musl has no
    ``malloc_trim``; ``mallinfo2`` is glibc 2.33 and later)."""
    lib = _libc()
    try:
        return getattr(lib, name) if lib is not None else None
    except AttributeError:
        return None


def _trim() -> Callable[[], int] | None:
    fn = libc_fn("malloc_trim")
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return lambda: fn(0)


_TRIM = _trim()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    fn = libc_fn("mallinfo2")
    if fn is None:
        return None
    fn.argtypes = []
    fn.restype = _MallInfo2
    return cast("Callable[[], _MallInfo2]", fn)


_MALLINFO2 = _mallinfo2()


def libc_heap_bytes() -> tuple[int, int] | None:
    """What glibc's allocator holds over all its arenas (the main heap, the threads' arenas and its
    large mmapped blocks): (bytes in use, bytes free but kept). Python's object arenas and Arrow's
    pool are not in it (both map their own memory). None on a libc without ``mallinfo2``. It walks
    the free lists under each arena's lock: tens of µs, so at scrape time only."""
    if _MALLINFO2 is None:
        return None
    m = _MALLINFO2()
    return m.uordblks + m.hblkhd, m.fordblks


def one_arena() -> bool:
    """Every thread allocates from glibc's main heap, none gets an arena of its own: called when a
    ``fetchlat proxy`` process starts, before its first thread (``app/__init__.py``: loading pyarrow
    starts two). glibc gives each thread that allocates its own arena (up to eight a
    core), and a block freed by another thread goes back to the arena it came from. The relay's
    thread allocates each read's items and the event loop frees them; the trace writer's thread
    builds Arrow tables; the loop allocates for both. Each arena then keeps its own free pieces
    among its live blocks, which no trim returns, and the two-hour soaks of the relay road put a
    sidecar's thread arenas at +0.45-0.85 MB/h (``bench/RESULTS.md``). One heap reuses every
    thread's freed pieces for every thread. The threads take one lock to allocate past their
    per-thread caches (glibc's tcache: the small blocks a thread freed last), which these few
    threads seldom contend for. False on a libc without ``mallopt`` (musl, macOS)."""
    fn = libc_fn("mallopt")
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return bool(fn(M_ARENA_MAX, 1))


def can_release() -> bool:
    return _TRIM is not None


def release_free_memory() -> bool:
    """Free heap pages (libc's, and Arrow's when traces are on) back to the system; True when libc
    gave some back."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    return bool(_TRIM()) if _TRIM is not None else False


def settle_heap() -> int:
    """Once the proxy is up: what exists now is never walked by the collector again (collected
    once first, so no garbage is frozen). How many objects that is."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()



class _Baseline:
    """The first census's allocation snapshot, which later ones are compared with."""

    snapshot: tracemalloc.Snapshot | None = None


def _grown_sites(top: int) -> str:
    """With tracemalloc on: the source lines whose live allocations grew most since the first
    census (the first one names the largest). Empty without it."""
    if not tracemalloc.is_tracing():
        return ""
    snap = tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    first = _Baseline.snapshot
    if first is None:
        _Baseline.snapshot = snap
        stats = [(s.traceback, s.size, s.count) for s in snap.statistics("lineno")[:top]]
        head = "; live allocations by line (tracemalloc, the baseline of later censuses): "
    else:
        diffs = sorted(snap.compare_to(first, "lineno"), key=lambda d: d.size_diff, reverse=True)[:top]
        stats = [(d.traceback, d.size_diff, d.count_diff) for d in diffs if d.size_diff > 0]
        head = "; allocations grown since the first census by line (tracemalloc): "
    return head + ", ".join(f"{tb[0].filename}:{tb[0].lineno} {size / 1024:+.1f} KiB ({count:+d})"
                            for tb, size, count in stats)


_ARENA_STATS = re.compile(r"^# (arenas allocated current|arenas highwater mark|bytes in allocated blocks|"
                          r"bytes in available blocks) += +([\d,]+)$|^(\d+) unused pools \* \d+ bytes += +([\d,]+)$",
                          re.MULTILINE)


def python_arenas() -> dict[str, int]:
    """What the interpreter's own allocator (obmalloc: 1 MiB arenas of 16 KiB pools, for objects
    of up to 512 bytes) holds, from ``sys._debugmallocstats``: arenas now and at most, bytes in
    live blocks, bytes free in partly used pools, bytes in empty pools. An arena goes back to
    the system only when all its pools are empty, so arenas rising while the blocks stay flat is
    fragmentation. That function writes to file descriptor 2, so for the few ms it runs
    stderr goes to a temporary file instead: on demand only (the census), never on a timer
    (another thread's stderr line meanwhile would land there). Empty where the interpreter
    does not say."""
    if not hasattr(sys, "_debugmallocstats"):
        return {}
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out: dict[str, int] = {}
    keys = {"arenas allocated current": "arenas", "arenas highwater mark": "arenas_highwater",
            "bytes in allocated blocks": "block_bytes", "bytes in available blocks": "free_block_bytes"}
    for m in _ARENA_STATS.finditer(text):
        if m.group(1):
            out[keys[m.group(1)]] = int(m.group(2).replace(",", ""))
        else:
            out["empty_pool_bytes"] = int(m.group(4).replace(",", ""))
    return out


def _arenas_said() -> str:
    a = {}
    with contextlib.suppress(OSError):
        a = python_arenas()
    if "arenas" not in a:
        return ""
    return (f", {a['arenas']} interpreter arenas (high-water {a.get('arenas_highwater', 0)}): "
            f"{a.get('block_bytes', 0) / 1e6:.1f} MB in blocks, {a.get('free_block_bytes', 0) / 1e6:.1f} MB free "
            f"in used pools, {a.get('empty_pool_bytes', 0) / 1e6:.1f} MB in empty pools")


def census(top: int = CENSUS_TOP, sites: int = 10) -> str:
    """The objects the collector tracks (containers: what a leak is made of), by type, the most
    numerous first; those frozen at start (``settle_heap``) are left out. Walks every one:
    tens of ms for a proxy's few hundred thousand, so on demand only (SIGUSR1). With tracemalloc
    tracing (``PYTHONTRACEMALLOC``), the ``sites`` lines whose allocations grew most after it.
    With the interpreter's arenas (``python_arenas``): fragmentation shows there."""
    counts = Counter(type(o).__qualname__ for o in gc.get_objects())
    total = sum(counts.values())
    listed = ", ".join(f"{name} {n}" for name, n in counts.most_common(top))
    return (f"heap census: {total} tracked objects ({gc.get_freeze_count()} frozen at start left out), "
            f"{sys.getallocatedblocks()} memory blocks{_arenas_said()}; by type: {listed}{_grown_sites(sites)}")

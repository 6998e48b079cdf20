"""proxy/memory.py: freed memory goes back to the system, and doing so is cheap."""

import sys
import time
import tracemalloc

import pytest
from fetchlat.proxy import heartbeat, memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


@pytest.mark.skipif(not memory.can_release(), reason="this libc has no malloc_trim")
def test_a_burst_freed_is_given_back():
    keep = []
    burst = []
    for i in range(20_000):  # ~60 MB of medium blocks, below mmap's threshold ...
        burst.append(bytes(3000))
        if i % 50 == 0:
            keep.append(bytearray(200))  # ... with live ones among them, as a heap has: freeing the
            # burst leaves holes that glibc keeps (measured: RSS does not move without the release)
    after_burst = _rss_mb()
    del burst
    memory.release_free_memory()
    assert _rss_mb() < after_burst - 40, "the burst's memory stayed resident"
    start = time.perf_counter_ns()
    memory.release_free_memory()
    assert time.perf_counter_ns() - start < 50_000_000  # nothing left to give: not a stall of the loop
    assert keep[-1] == bytearray(200)


def test_arrow_memory_freed_in_another_thread_is_given_back():
    """The trace writer builds its tables in its own thread; the tick's release runs on the loop."""
    import threading

    import pyarrow as pa

    built, done = threading.Event(), threading.Event()
    seen: dict[str, float] = {}

    def writer() -> None:
        tables = [pa.table({"a": pa.array(range(i, i + 50_000))}) for i in range(200)]  # ~80 MB
        del tables
        seen["freed"] = _rss_mb()
        built.set()
        done.wait(30)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert built.wait(30)
        memory.release_free_memory()
        assert _rss_mb() < seen["freed"] - 40, "Arrow's freed tables stayed resident"
    finally:
        done.set()
        t.join(30)


def test_the_startup_heap_is_frozen_out_of_the_collectors_walk():
    import gc

    gc.unfreeze()
    try:
        before = len(gc.get_objects())  # what a full collection walks
        frozen = memory.settle_heap()
        assert frozen >= before // 2
        # frozen objects still die by refcount (another test's thread may drop some meanwhile)
        assert before // 2 <= gc.get_freeze_count() <= frozen
        assert len(gc.get_objects()) < before // 10  # walked from now on: only what came after
    finally:
        gc.unfreeze()


def test_the_tick_releases_once_a_minute():
    assert heartbeat.BEATS_PER_RELEASE * heartbeat.TICK_S == memory.RELEASE_EVERY_S



class Leaked:  # a structure that grows: what the census must name
    def __init__(self) -> None:
        self.held: dict[str, int] = {}


def test_the_census_names_what_grew() -> None:
    before = memory.census(top=100_000)
    grown = [Leaked() for _ in range(20_000)]
    after = memory.census(top=100_000)  # every type: inside a whole test run others are more numerous
    assert "Leaked" not in before
    assert after.startswith("heap census: "), after
    assert ", Leaked 20000" in after or "by type: Leaked 20000" in after, after
    del grown


def test_with_tracemalloc_the_census_names_the_line_that_grew() -> None:
    """Strings in a dict are not tracked by the collector: the type counts miss them, the
    allocation sites do not."""
    tracemalloc.start(1)
    memory._Baseline.snapshot = None
    try:
        first = memory.census(top=3)
        filler: dict[str, bytes] = {}
        for i in range(20_000):
            filler[f"client-{i}"] = b"x" * 40  # the line the census must name
        line = sys._getframe().f_lineno - 1
        after = memory.census(top=3)
    finally:
        tracemalloc.stop()
        memory._Baseline.snapshot = None
    assert "live allocations by line (tracemalloc" in first, first
    grown = after.split("allocations grown since the first census by line (tracemalloc): ", 1)[1]
    assert f"{__file__}:{line} +" in grown.split(", ")[0], grown
    assert memory.census(top=3).count("tracemalloc") == 0  # off again: the census as before
    del filler


@pytest.mark.skipif(memory.libc_heap_bytes() is None, reason="this libc has no mallinfo2")
def test_glibcs_heap_is_counted_in_use_and_free():
    """``fetchlat_libc_heap_bytes``: blocks malloc'd show in use; once freed they show free (kept)
    until the release gives them back."""
    in_use0, _ = memory.libc_heap_bytes()
    keep, burst = [], []
    for i in range(10_000):  # ~30 MB of glibc blocks (bytes this size skip Python's small-object arenas)
        burst.append(bytes(3000))
        if i % 50 == 0:
            keep.append(bytes(3000))  # live blocks among them, so the freed ones stay as holes
    in_use1, _ = memory.libc_heap_bytes()
    assert in_use1 >= in_use0 + 25_000_000
    del burst
    in_use2, free2 = memory.libc_heap_bytes()
    assert in_use2 <= in_use1 - 25_000_000
    assert free2 >= 25_000_000, "freed blocks not counted as kept"
    assert len(keep) == 200


def test_resident_memory_is_told_apart_by_allocator():
    """testkit/procfs.py (the soak's sampler): the kinds add up to the whole RSS, and a thread's
    malloc'd blocks land in ``thread_arenas``, not in the main heap."""
    import os
    import threading

    from testkit.procfs import rss_by_mapping_mb, rss_mb

    held: list[bytes] = []
    ready, done = threading.Event(), threading.Event()

    def thread() -> None:
        held.extend(bytes(3000) for _ in range(10_000))  # ~30 MB in this thread's glibc arena (an arena
        # reused from an earlier thread may take some of it in pages still resident)
        ready.set()
        done.wait(30)

    memory.release_free_memory()  # free pages an earlier thread left in an arena would take the blocks unseen
    before = rss_by_mapping_mb(os.getpid())
    t = threading.Thread(target=thread)
    t.start()
    try:
        assert ready.wait(30)
        during = rss_by_mapping_mb(os.getpid())
        assert abs(sum(during.values()) - rss_mb(os.getpid())) < 2
        assert during["thread_arenas"] >= before["thread_arenas"] + 10
        assert during["heap"] < before["heap"] + 5
    finally:
        done.set()
        t.join(30)


@pytest.mark.skipif(not memory.python_arenas(), reason="this interpreter has no _debugmallocstats")
def test_the_interpreters_arenas_show_fragmentation():
    """``python_arenas`` (in the census): objects made fill arenas; freeing all but one object in
    sixteen keeps the arenas (each still holds a live block) while their free bytes rise, which
    is what fragmentation looks like. stderr is whole afterwards."""
    before = memory.python_arenas()
    made = [[i] for i in range(300_000)]  # ~30 MB of small objects: lists of one int
    during = memory.python_arenas()
    assert during["arenas"] >= before["arenas"] + 15
    assert during["block_bytes"] >= before["block_bytes"] + 15_000_000
    kept = made[::16]
    del made
    after = memory.python_arenas()
    assert after["block_bytes"] <= during["block_bytes"] - 10_000_000
    assert after["arenas"] >= during["arenas"] - 3, "arenas with a live block went back"
    assert after["free_block_bytes"] >= during["free_block_bytes"] + 10_000_000
    assert len(kept) == 18_750
    print("stderr still works", file=sys.stderr)
    assert "interpreter arenas" in memory.census(top=1)


_THREADS_ALLOCATE = """
import sys, threading
from fetchlat.proxy import memory
from testkit.procfs import rss_by_mapping_mb
if sys.argv[1] == "one":
    assert memory.one_arena()
kept = []
def allocate():
    kept.append([bytes(20_000) for _ in range(200)])  # 4 MB a thread in blocks below mmap's threshold
threads = [threading.Thread(target=allocate) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(rss_by_mapping_mb(__import__("os").getpid())["thread_arenas"])
"""


@pytest.mark.skipif(memory.libc_fn("mallopt") is None or not sys.platform.startswith("linux"),
                    reason="glibc's arenas only")
def test_with_one_arena_threads_allocate_from_the_main_heap():
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]

    def arenas_mb(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", _THREADS_ALLOCATE, mode], cwd=root, capture_output=True,
                             text=True, timeout=60, check=True)
        return float(out.stdout.split()[-1])

    assert arenas_mb("many") > 3  # glibc's own way: threads allocate in arenas of their own
    assert arenas_mb("one") == 0

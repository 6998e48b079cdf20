"""What /proc says of a process: its resident memory, its open files and how often a thread of
its own went to sleep (the tests and the benchmarks that watch the proxy process)."""

from __future__ import annotations

import os
from pathlib import Path


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def rss_mb(pid: int) -> float:
    return rss_bytes(pid) / (1024 * 1024)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def voluntary_switches(tid: int) -> int:
    """How many times thread ``tid`` of this process has gone to sleep (``voluntary_ctxt_switches``):
    a thread that wakes on a timer of its own adds one a wake-up."""
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            return int(line.split()[1])
    raise RuntimeError(f"no voluntary_ctxt_switches for thread {tid}")


def thread_named(name: str) -> int:
    """The id of this process's thread named ``name`` (its ``comm``: a native thread has no
    ``threading.Thread`` to ask)."""
    for task in Path("/proc/self/task").iterdir():
        if (task / "comm").read_text().strip() == name:
            return int(task.name)
    raise RuntimeError(f"no thread named {name}")


MAPPING_KINDS = ("heap", "thread_arenas", "big_anon", "anon", "file")  # rss_by_mapping_mb's keys
_ARENA_SPAN = 64 << 20  # a glibc thread arena's heap: a 64 MiB-aligned span, rw-p then ---p


def rss_by_mapping_mb(pid: int) -> dict[str, float]:
    """Resident MB by kind of mapping (``/proc/PID/smaps``): ``heap`` (glibc's main heap),
    ``thread_arenas`` (glibc's arenas for other threads: a 64 MiB-aligned read-write mapping with
    its reserved, inaccessible rest right after it), ``big_anon`` (other anonymous mappings of
    64 MiB or more: the regions mimalloc, Arrow's allocator, reserves), ``anon`` (the other
    anonymous mappings: the interpreter's 1 MiB arenas, glibc's large blocks, thread stacks),
    ``file`` (libraries and other files mapped). Tells which allocator holds a rise that no live
    object explains."""
    out = dict.fromkeys(MAPPING_KINDS, 0)
    maps: list[tuple[int, int, str, str, int]] = []  # start, end, perms, name, resident kB
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            first = line.split(maxsplit=5)
            if "-" in first[0] and len(first) >= 5 and ":" in first[3]:  # a mapping's header line
                start, end = (int(x, 16) for x in first[0].split("-"))
                maps.append((start, end, first[1], first[5].strip() if len(first) > 5 else "", 0))
            elif first[0] == "Rss:" and maps:
                maps[-1] = (*maps[-1][:4], int(first[1]))
    for i, (start, end, perms, name, rss) in enumerate(maps):
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        if name == "[heap]":
            kind = "heap"
        elif name.startswith("/"):
            kind = "file"
        elif name:
            kind = "anon"  # [stack], [vdso] and the like
        elif (start % _ARENA_SPAN == 0 and perms.startswith("rw") and nxt is not None and nxt[0] == end
              and nxt[2].startswith("---") and not nxt[3] and nxt[1] - start == _ARENA_SPAN):
            kind = "thread_arenas"
        elif end - start >= _ARENA_SPAN:
            kind = "big_anon"
        else:
            kind = "anon"
        out[kind] += rss
    return {k: round(v / 1024, 2) for k, v in out.items()}

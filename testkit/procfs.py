"""What /proc says of a process: its resident memory and its open files (the tests and the
benchmarks that watch the proxy process)."""

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


def rss_by_mapping_mb(pid: int) -> dict[str, float]:
    """Resident MB by kind of mapping (``/proc/PID/smaps``): ``heap`` (the main malloc heap),
    ``anon`` (anonymous mappings: the interpreter's arenas, other malloc arenas, Arrow's pool, thread
    stacks), ``file`` (libraries and other files mapped). Tells which allocator holds a rise that
    no live object explains."""
    out = {"heap": 0, "anon": 0, "file": 0}
    kind = "anon"
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            first = line.split(maxsplit=6)
            if "-" in first[0] and len(first) >= 5 and ":" in first[3]:  # a mapping's header line
                name = first[5].strip() if len(first) > 5 else ""
                kind = "heap" if name == "[heap]" else "file" if name.startswith("/") else "anon"
            elif first[0] == "Rss:":
                out[kind] += int(first[1])
    return {k: round(v / 1024, 2) for k, v in out.items()}

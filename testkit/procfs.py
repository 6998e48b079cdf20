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

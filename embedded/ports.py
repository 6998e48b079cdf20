"""Loopback ports and waiting for a process to come up: what the demo, the embedded brokers and
the benchmarks share when they start processes of their own."""

from __future__ import annotations

import contextlib
import random
import socket
import time
from typing import Any


def free_port_block(*offsets: int) -> int:
    """A base port such that ``base + o`` is free on 127.0.0.1 for every offset ``o``."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        ok = True
        for o in offsets:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + o))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports on 127.0.0.1")


def wait_until(pred: Any, what: str, timeout_s: float = 20.0) -> None:
    """Poll ``pred`` every 50 ms (an OSError counts as not yet) until true, or raise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if pred():
                return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def connects(port: int) -> bool:
    """Whether a TCP connection to 127.0.0.1:``port`` opens within a second."""
    with socket.create_connection(("127.0.0.1", port), 1):
        return True

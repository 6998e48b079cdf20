"""The time slice the kernel gives a proxy thread: read, and a shorter one asked for.

A sidecar shares its node with its broker. When the broker's threads fill the cores, a proxy
thread that wakes (its timer, a socket with bytes) waits for a core, and every byte it carries
waits with it. Linux's scheduler since 6.6 (EEVDF) lets the running thread finish its slice
(3 ms by default, more with many cores) before a waking thread of the same weight runs; since
6.12 a thread may ask for a shorter slice (``sched_setattr``, ``sched_runtime`` for a normal
thread, 0.1-100 ms), which gives it an earlier deadline, so that it runs as it wakes. The
proxy's threads run for microseconds at a time and sleep between: a short slice costs them
nothing, and takes nothing from the broker but the moment it waits.

No privilege is needed (the nice value is kept as it is). Where the kernel does not know the
call (before 3.14) or the field (before 6.12), nothing changes, and the caller says so.

Owns: the system call and its structure. Must never: change a thread's nice value or policy.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Final

# the system call numbers (the kernel's unistd tables): x86_64's own; aarch64's are asm-generic's
_SYSCALLS: Final = {"x86_64": (314, 315), "aarch64": (274, 275)}
SCHED_OTHER: Final = 0
SCHED_BATCH: Final = 3


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64), ("sched_util_min", ctypes.c_uint32),
                ("sched_util_max", ctypes.c_uint32)]


def _calls() -> tuple[int, int] | None:
    if os.uname().sysname != "Linux":
        return None
    return _SYSCALLS.get(platform.machine())


def _get(tid: int) -> _SchedAttr | None:
    calls = _calls()
    if calls is None:
        return None
    attr = _SchedAttr()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(calls[1], tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    return attr


def read_slice_ns(tid: int = 0) -> int | None:
    """The time slice of thread ``tid`` (0: the caller), in ns, as the kernel reports it (the
    default, or the one asked for); None where it cannot be read."""
    attr = _get(tid)
    return None if attr is None or attr.sched_policy not in (SCHED_OTHER, SCHED_BATCH) else int(attr.sched_runtime)


def set_slice_ns(slice_ns: int, tid: int = 0) -> bool:
    """Asks for a time slice of ``slice_ns`` for thread ``tid`` (0: the caller; a ``slice_ns`` of 0:
    the kernel's default again), its nice value and policy kept; whether the kernel took it (it
    clamps the value to 0.1-100 ms)."""
    calls = _calls()
    attr = _get(tid)
    if calls is None or attr is None or attr.sched_policy not in (SCHED_OTHER, SCHED_BATCH):
        return False
    attr.size = ctypes.sizeof(attr)
    attr.sched_flags = 0
    attr.sched_runtime = slice_ns
    attr.sched_deadline = attr.sched_period = 0
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(calls[0], tid, ctypes.byref(attr), 0) != 0:
        return False
    now = read_slice_ns(tid)
    return now is not None and (slice_ns == 0 or abs(now - slice_ns) <= slice_ns // 10 + 1000)

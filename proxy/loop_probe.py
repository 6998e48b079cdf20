"""What held the event loop when its tick came late: the "why" of ``fetchlat_event_loop_lag_seconds``.

The proxy's tick (``heartbeat.py``) is due once a second; how late it runs is the loop lag, the
time every connection on the loop waited. With ``loop_probe: true`` (off by default) a thread of
this module's own wakes ``LATE_NS`` (5 ms, the loop-lag goal's bound) after each tick was due;
when the tick has not started by then, it reads where the loop's thread is in the kernel
(``/proc/self/task/TID/wchan``: the kernel function it sleeps in, if it sleeps) and where every
Python thread of the proxy is (``sys._current_frames``: file, line and function, never a value),
then watches the loop's thread for ``SPAN_NS`` in the kernel scheduler's own counters
(``schedstat``: the time it ran, and the time it waited for a core). It reads nothing before a
tick is late: a thread of its own awake just before each tick would change what it reads. The
loop's thread was:

- **running**: a callback held the loop (its innermost Python frames say where; code the build
  compiled has no frame of its own, so the nearest caller that has one stands for it);
- **waiting_for_cpu**: ready to run, but every core was busy (a node whose cores the broker fills);
- **in_poll**: asleep in ``epoll_wait`` with nothing to run: its timer had not woken it yet (the
  kernel's timer, or on a virtual machine the hypervisor's, came late);
- **blocked**: asleep elsewhere: waiting for the interpreter (another thread of the proxy held
  it: the other threads' frames say which), a lock, or the disk (the kernel function says which).

Each late tick is counted by that state (``fetchlat_event_loop_late_ticks_total{loop}``) and
logged, once a minute at most (the lines in between counted in the next one). The thread sleeps
between ticks: one wake-up a second, tens of microseconds.

Owns: the late tick's reading. Must never: read a frame's values (only where it is), wake the
loop, or keep the interpreter past one reading of the frames.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Final

from ..metrics.prom import ProxyMetrics
from . import clock
from .throttled_log import ThrottledLog

log = logging.getLogger("fetchlat.proxy")

LATE_NS: Final = 5_000_000
SPAN_NS: Final = 5_000_000  # how long a late tick's loop thread is watched
FRAMES: Final = 6  # of the loop's thread, innermost first
OTHER_FRAMES: Final = 2  # of each other thread
LOG_EVERY_S: Final = 60.0
RUNNING, WAITING_FOR_CPU, IN_POLL, BLOCKED, UNKNOWN = "running", "waiting_for_cpu", "in_poll", "blocked", "unknown"
STATES: Final = (RUNNING, WAITING_FOR_CPU, IN_POLL, BLOCKED, UNKNOWN)


def where(frame: FrameType | None, depth: int) -> str:
    """Up to ``depth`` frames from ``frame`` outwards, as ``file:line function``, innermost first;
    a file inside the package by its path in it."""
    out: list[str] = []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        path = code.co_filename
        cut = path.rfind("/fetchlat/")
        out.append(f"{path[cut + 10:] if cut >= 0 else path.rsplit('/', 1)[-1]}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return " < ".join(out) if out else "(no Python frame)"


def sched_ns(native_id: int) -> tuple[int, int] | None:
    """Thread ``native_id``'s time on a core and time waiting for one (ns), as the kernel's
    scheduler counts them; None where it does not say (not Linux, no schedstat)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            run, wait, _ = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def kernel_wait(native_id: int) -> str:
    """The kernel function thread ``native_id`` sleeps in ("" where it runs, or cannot be read)."""
    try:
        with open(f"/proc/self/task/{native_id}/wchan") as f:
            text = f.read().strip()
    except OSError:
        return ""
    return "" if text == "0" else text


def state_of(before: tuple[int, int] | None, after: tuple[int, int] | None, span_ns: int, wait: str) -> str:
    """What a thread did over ``span_ns``, from its ``sched_ns`` at both ends and the kernel
    function it slept in at the start (``kernel_wait``): the larger of its running and its waiting
    for a core where that is half the span or more, else asleep: in poll, or blocked."""
    if before is None or after is None or span_ns <= 0:
        return UNKNOWN
    ran, waited = after[0] - before[0], after[1] - before[1]
    if max(ran, waited) * 2 < span_ns:
        return IN_POLL if "ep_poll" in wait or "epoll" in wait else BLOCKED
    return RUNNING if ran >= waited else WAITING_FOR_CPU


class LoopProbe:
    """Reads the loop's thread at each late tick. ``due_ns``: when the heartbeat's next tick is
    due (monotonic ns, 0 before it starts; a tick sets the next one as it starts);
    ``loop_thread``, ``loop_native_id``: the loop's thread's ident and its id in the kernel."""

    def __init__(self, due_ns: Callable[[], int], loop_thread: int, loop_native_id: int,
                 metrics: ProxyMetrics) -> None:
        self.due_ns = due_ns
        self.loop_thread = loop_thread
        self.loop_native_id = loop_native_id
        self.metrics = metrics
        for state in STATES:
            metrics.loop_late_ticks.labels(state)  # each series from 0, so that its rate reads from the start
        self.throttled = ThrottledLog(log)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fetchlat-loop-probe", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _sleep_until(self, t_ns: int) -> bool:
        """Sleeps until monotonic ``t_ns``; False once stopped."""
        left_s = (t_ns - clock.now_ns()) / 1e9
        return not (self._stop.wait(left_s) if left_s > 0 else self._stop.is_set())

    def _run(self) -> None:
        while not self._stop.is_set():
            due = self.due_ns()
            if due == 0:
                self._stop.wait(0.1)
                continue
            if not self._sleep_until(due + LATE_NS):
                return
            if self.due_ns() != due:
                continue  # on time
            # where it is, then its counters over a span this thread sleeps through: this thread
            # holds the interpreter while it reads, which a loop running Python waits for
            wait, frames = kernel_wait(self.loop_native_id), sys._current_frames()
            before, t0 = sched_ns(self.loop_native_id), clock.now_ns()
            if not self._sleep_until(t0 + SPAN_NS):
                return
            after, t1 = sched_ns(self.loop_native_id), clock.now_ns()
            self.read(t0 - due, t1 - t0, state_of(before, after, t1 - t0, wait), wait, frames)
            while self.due_ns() == due and not self._stop.wait(0.1):
                pass  # the tick is still to come (a stopped loop: ten looks a second)

    def read(self, late_ns: int, span_ns: int, state: str, wait: str, frames: dict[int, FrameType]) -> None:
        """A tick still to run ``late_ns`` after it was due, its loop's thread ``state`` over the
        ``span_ns`` that followed: counted, and logged with the kernel function that thread slept
        in and where the proxy's threads were then. (When the tick ran is not read here: the
        loop-lag histogram has it.)"""
        names = {t.ident: t.name for t in threading.enumerate()}
        me = threading.get_ident()
        others = "; ".join(f"{names.get(ident, ident)}: {where(f, OTHER_FRAMES)}" for ident, f in frames.items()
                           if ident not in (self.loop_thread, me)) or "none"
        self.metrics.loop_late_ticks.labels(state).inc()
        in_kernel = f" (in the kernel's {wait})" if wait and state in (IN_POLL, BLOCKED) else ""
        self.throttled("loop-late", logging.INFO, "the event loop's tick was still to run %.1f ms after it was due; "
                       "over the next %.1f ms its thread was %s%s, at %s (other threads: %s)", late_ns / 1e6,
                       span_ns / 1e6, state.replace("_", " "), in_kernel, where(frames.get(self.loop_thread), FRAMES),
                       others, every_s=LOG_EVERY_S)

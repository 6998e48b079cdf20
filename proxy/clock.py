"""The one place fetchlat reads clocks. Intervals use the monotonic clock (ns)."""

import time

now_ns = time.monotonic_ns
wall_ns = time.time_ns

OFFSET_REFRESH_NS = 100_000_000  # wall - monotonic is read again at most this often
OFFSET_TRIES = 3  # pairs read for one offset; the tightest is kept
TIGHT_NS = 20_000  # a pair read within this needs no second try


def read_wall_minus_mono_ns() -> int:
    """wall - monotonic, as of now. The wall clock is read between two monotonic reads and the
    offset taken at their midpoint; a pair the thread was preempted inside (the reads far apart)
    is read again, up to ``OFFSET_TRIES`` times, and the tightest kept. One plain pair of reads
    would carry a preemption between them into the offset whole."""
    best_gap = -1
    best = 0
    for _ in range(OFFSET_TRIES):
        m1 = now_ns()
        w = wall_ns()
        m2 = now_ns()
        gap = m2 - m1
        if best_gap < 0 or gap < best_gap:
            best_gap, best = gap, w - (m1 + m2) // 2
        if gap < TIGHT_NS:
            break
    return best


class WallOffset:
    """wall - monotonic for moving kernel (``CLOCK_REALTIME``) times onto the monotonic clock,
    read again once ``OFFSET_REFRESH_NS`` has passed: a clock step or an NTP slew reaches it
    within 100 ms, and a read of a socket costs no clock read of its own for it."""

    def __init__(self) -> None:
        self.read_at_ns = -OFFSET_REFRESH_NS
        self.offset_ns = 0

    def at(self, mono_now_ns: int) -> int:
        if mono_now_ns - self.read_at_ns >= OFFSET_REFRESH_NS or mono_now_ns < self.read_at_ns:
            self.offset_ns = read_wall_minus_mono_ns()
            self.read_at_ns = mono_now_ns
        return self.offset_ns

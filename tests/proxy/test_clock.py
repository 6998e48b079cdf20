"""proxy/clock.py: the offset that moves kernel (wall clock) stamps onto the monotonic clock is
read so a preemption between two clock reads cannot move it, and is refreshed every 100 ms."""

from __future__ import annotations

import pytest
from fetchlat.proxy import clock


def scripted(monkeypatch: pytest.MonkeyPatch, mono: list[int], wall: list[int]) -> None:
    m, w = iter(mono), iter(wall)
    monkeypatch.setattr(clock, "now_ns", lambda: next(m))
    monkeypatch.setattr(clock, "wall_ns", lambda: next(w))


def test_a_pair_read_across_a_preemption_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # true offset 1_000_000: the first pair's wall read came 5 ms late (the thread was preempted
    # between the reads); the second pair is tight
    scripted(monkeypatch, mono=[100, 5_000_100, 6_000_000, 6_000_010], wall=[5_001_100, 7_000_005])
    assert clock.read_wall_minus_mono_ns() == 1_000_000  # a plain pair would have been 5 ms off


def test_the_tightest_of_three_loose_pairs_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, mono=[0, 90_000, 100_000, 130_000, 200_000, 260_000],
             wall=[1_000_045_000, 1_000_115_000, 1_000_230_000])
    assert clock.read_wall_minus_mono_ns() == 1_000_000_000


def test_the_offset_is_read_again_every_100_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    monkeypatch.setattr(clock, "read_wall_minus_mono_ns", lambda: reads.append(1) or 7 * len(reads))
    off = clock.WallOffset()
    assert off.at(1_000_000_000) == 7
    assert off.at(1_050_000_000) == 7 and len(reads) == 1  # within 100 ms: no clock read
    assert off.at(1_100_000_000) == 14  # a clock step or a slew reaches it within 100 ms
    assert off.at(900_000_000) == 21  # never trusted across a monotonic time before its read


def test_the_real_clocks_agree_with_a_plain_read() -> None:
    plain = clock.wall_ns() - clock.now_ns()
    assert abs(clock.read_wall_minus_mono_ns() - plain) < 50_000_000

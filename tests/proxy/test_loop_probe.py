"""The loop probe reads a late tick as what the loop's thread did meanwhile (the scheduler's own
counters) and where it was, and leaves a tick on time alone."""

from __future__ import annotations

import hashlib
import logging
import select
import sys
import threading
import time

import pytest
from fetchlat.metrics.prom import ProxyMetrics
from fetchlat.proxy import clock
from fetchlat.proxy.loop_probe import (
    BLOCKED,
    IN_POLL,
    RUNNING,
    STATES,
    UNKNOWN,
    WAITING_FOR_CPU,
    LoopProbe,
    sched_ns,
    state_of,
    where,
)
from prometheus_client import CollectorRegistry

MS = 1_000_000


def test_what_a_thread_did_over_a_span() -> None:
    assert state_of((0, 0), (4 * MS, 0), 6 * MS, "") == RUNNING
    assert state_of((0, 0), (MS, 4 * MS), 6 * MS, "") == WAITING_FOR_CPU
    assert state_of((0, 0), (MS, MS), 6 * MS, "futex_wait_queue") == BLOCKED  # the interpreter, a lock, the disk
    assert state_of((0, 0), (MS, MS), 6 * MS, "ep_poll") == IN_POLL  # its timer had not woken it
    assert state_of(None, (MS, MS), 6 * MS, "") == UNKNOWN
    assert state_of((5, 5), (5, 5), 0, "") == UNKNOWN


def test_where_names_code_locations_only() -> None:
    secret = "record value"  # noqa: F841 - a local a frame holds: never written
    text = where(sys._getframe(), 2)
    assert "test_loop_probe.py:" in text and "test_where_names_code_locations_only" in text
    assert "record value" not in text


def spin(until_ns: int) -> None:
    """A core kept busy without the interpreter (hashing lets go of it), so that the probe's own
    turns at the interpreter do not stand in the way of what it measures."""
    block = bytes(8 << 20)
    while clock.now_ns() < until_ns:
        hashlib.sha256(block)


def _probe(due: list[int]) -> tuple[LoopProbe, ProxyMetrics]:
    metrics = ProxyMetrics(CollectorRegistry())
    probe = LoopProbe(lambda: due[0], threading.get_ident(), threading.get_native_id(), metrics)
    probe.start()
    return probe, metrics


def _late(metrics: ProxyMetrics) -> dict[str, float]:
    return {s: metrics.loop_late_ticks.labels(s).value for s in STATES}


@pytest.mark.skipif(sched_ns(threading.get_native_id()) is None, reason="the kernel's schedstat is not readable")
def test_late_ticks_are_read_and_on_time_ones_are_not(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="fetchlat.proxy")
    # on time: the "tick" moves the due time before the probe would call it late
    due = [clock.now_ns() + 100 * MS]
    probe, metrics = _probe(due)
    try:
        time.sleep(0.05)  # half the way: a loaded machine's sleep overshoots by ms, not by 55
        due[0] = clock.now_ns() + 10 * 1000 * MS
        time.sleep(0.05)
    finally:
        probe.stop()
    assert sum(_late(metrics).values()) == 0
    # late, the loop's thread asleep (as behind the interpreter another thread holds)
    due = [clock.now_ns() + 100 * MS]
    probe, metrics = _probe(due)
    try:
        time.sleep(0.5)
        due[0] = clock.now_ns() + 10 * 1000 * MS
    finally:
        probe.stop()
    assert _late(metrics) == {RUNNING: 0, WAITING_FOR_CPU: 0, IN_POLL: 0, BLOCKED: 1, UNKNOWN: 0}
    assert "thread was blocked (in the kernel's " in caplog.text
    # late, the loop's thread asleep in epoll_wait: its timer had not woken it
    caplog.clear()
    due = [clock.now_ns() + 100 * MS]
    probe, metrics = _probe(due)
    try:
        with select.epoll() as ep:
            ep.poll(0.5)
        due[0] = clock.now_ns() + 10 * 1000 * MS
    finally:
        probe.stop()
    assert _late(metrics) == {RUNNING: 0, WAITING_FOR_CPU: 0, IN_POLL: 1, BLOCKED: 0, UNKNOWN: 0}
    # late, the loop's thread busy: running (or, on a machine this busy, waiting for a core), and
    # where: in the function that spins
    caplog.clear()
    due = [clock.now_ns() + 100 * MS]
    probe, metrics = _probe(due)
    try:
        spin(due[0] + 400 * MS)
        due[0] = clock.now_ns() + 10 * 1000 * MS
        time.sleep(0.05)
    finally:
        probe.stop()
    late = _late(metrics)
    assert late[RUNNING] + late[WAITING_FOR_CPU] == 1, (late, caplog.text)
    assert late[BLOCKED] == late[IN_POLL] == late[UNKNOWN] == 0, (late, caplog.text)
    assert " spin < " in caplog.text

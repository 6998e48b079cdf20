"""The proxy's own timer, once a second: the loop's lag, the drain of what the native core
queued, the asks for unnamed topics, the connections' timeouts, freed memory given back; and the
scrape's settle (a scrape first has the loop take what the core queued).

Each of its wake-ups costs the loop's thread ~230 µs on the development VM, the kernel's side
and cold caches more than the tick's own work (a bare uvloop timer at 10 Hz: 1.6 ms of CPU a
second): at 10 Hz it was most of an idle sidecar's CPU, and at 4 Hz still half the loop thread's
during a consume the core relays. Once a second, the loop-lag histogram's share of late samples
is still the share of the time the loop was late (each sample lands at a moment independent of
the stalls): its p99 alert reads the same, from 300 samples in 5 minutes.

Owns: the tick's order of work and its timing. Must never: block the loop, or stop ticking when
one tick raises (the next is set first).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Set

from ..metrics.observer import Observer
from ..metrics.prom import ProxyMetrics
from . import clock
from .discovery import Discovery
from .loop_probe import LoopProbe
from .memory import RELEASE_EVERY_S, release_free_memory
from .relayed import RelayRoad
from .session import ClientSide
from .traces import TraceWriter

TICK_S = 1.0
TICK_NS = int(TICK_S * 1e9)
SETTLE_S = 0.5  # the most a scrape waits for the loop to take what the native core queued (settle)
BEATS_PER_RELEASE = int(RELEASE_EVERY_S / TICK_S)  # freed memory back to the system (proxy/memory.py)


class Heartbeat:
    def __init__(self, metrics: ProxyMetrics, observer: Observer, discovery: Discovery,
                 sessions: Set[ClientSide], relay: RelayRoad | None) -> None:
        self.metrics = metrics
        self.observer = observer
        self.discovery = discovery
        self.sessions = sessions
        self.relay = relay
        self.traces: TraceWriter | None = None  # set once traces are on
        self.loop: asyncio.AbstractEventLoop | None = None  # set by start (settle reads it)
        self.last_beat_ns = clock.now_ns()
        self._handle: asyncio.TimerHandle | None = None
        self._due_ns = 0  # when the next tick is asked for (monotonic ns)
        self._beat = 0
        self.probe: LoopProbe | None = None

    def start(self, loop: asyncio.AbstractEventLoop, probe: bool = False) -> None:
        """On the loop's thread, from a coroutine; with ``probe``, a thread that reads what held
        the loop whenever a tick comes 5 ms late (``loop_probe.py``)."""
        self.loop = loop
        self._due_ns = clock.now_ns() + TICK_NS
        self._handle = loop.call_later(TICK_S, self._tick)
        if probe:
            self.probe = LoopProbe(lambda: self._due_ns, threading.get_ident(), threading.get_native_id(), self.metrics)
            self.probe.start()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self.probe is not None:
            self.probe.stop()

    def age_s(self) -> float:
        """Seconds since the last tick ran (a live loop: about ``TICK_S`` at most)."""
        return (clock.now_ns() - self.last_beat_ns) / 1e9

    def _tick(self) -> None:
        """Every second (``TICK_S``), one timer callback (no task, no coroutine: an idle
        sidecar's CPU is mostly these wake-ups): how much later than asked the loop ran it (a
        busy or blocked loop delays every connection by as much:
        ``fetchlat_event_loop_lag_seconds``); take what the native core queued of the
        connections it carries (the loop's only wake-up for them while it keeps its time); ask
        the broker about a topic id or a partition's leader the model met and cannot name (the
        fetches until the answer cannot be dated by it); mark the loop alive, refresh the
        trace clock pair, close connections that overstayed (each one's policy says why). Every
        minute: give freed memory back to the system. The next tick is set first, so one that
        raises does not stop the ticking."""
        woke = clock.now_ns()
        self.metrics.loop_lag.observe(max(0, woke - self._due_ns) / 1e9)
        self._due_ns = woke + TICK_NS
        self._handle = asyncio.get_running_loop().call_later(TICK_S, self._tick)
        self.observer.date_awaiting(woke)  # fetches held for the broker's answer, before the next ones
        if self.relay is not None:
            self.relay.drain()  # what the core queued since the last tick (relay/queue.rs: BATCH_NS is its fallback)
        if self.traces is not None:
            self.traces.columns.tick(woke)  # rows gathered go to the writer once the first has waited its hold
        if self.discovery.asks_topics():
            self.discovery.kick()  # a topic id without a name, a leader unknown, or the refresh due: ask now
        self._beat += 1
        self.last_beat_ns = woke
        self.observer.set_clock(clock.wall_ns(), woke)
        if self.relay is not None:
            self.relay.tick(woke)  # the core's timers of the connections it carries, for expiry below
        for sess in list(self.sessions):
            close = sess.conv.expire(woke)
            if close is not None:
                sess.apply((close,))
        if self._beat % BEATS_PER_RELEASE == 0:
            release_free_memory()

    def settle(self, timeout_s: float = SETTLE_S) -> None:
        """From another thread (the admin endpoint's, before a scrape): have the loop take what
        the native core queued of the connections it carries, and wait for it (at most
        ``timeout_s``: a loop that busy answers a scrape with what it has). Without it a relayed
        exchange reached the metrics up to a tick after its bytes (``TICK_S``, the core's
        fallback wake ``BATCH_NS``): a scrape right after a client finished missed its fetches."""
        loop, relay = self.loop, self.relay
        if loop is None or relay is None or loop.is_closed():
            return
        done = threading.Event()

        def drain() -> None:
            try:
                relay.drain()
            finally:
                done.set()

        try:
            loop.call_soon_threadsafe(drain)
        except RuntimeError:  # the loop closed meanwhile
            return
        done.wait(timeout_s)

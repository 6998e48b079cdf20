"""Fetches whose dating waits on what the proxy has asked its broker.

A proxy beside one broker dates a consumer fetch's data by who leads its partition: where its
broker leads it, by the produces it saw (or the batch's timestamp); where its broker only
follows it (KIP-392, a consumer in a follower's rack), by the answer, since a follower shows
data once its high watermark moves, which the proxy never sees (``model.py``, ``REPLICA_HW``).
A partition met for the first time has no known leader (a topic made after the proxy's last
ask, a topic id not yet named): the model marks it wanted (``ClusterView``), and the proxy asks
its broker at its next tick (``proxy/heartbeat.py``). The fetches answered until then used to be
dated as if the broker led the partition: at a follower, each one "immediate" where the broker
had parked it (on 2026-12-07, the first 11 of 263 fetches of a follower's consumer: about a
second of them, one batch of the native relay's).

So such a fetch, and every fetch after it (their order kept: the model's view of each
partition moves with them), waits here until the broker's answer came (the model wants nothing
more) and is then dated with what it says; or, if no answer comes within ``HOLD_MAX_NS``, dated
with what is known then, and nothing is held again for ``REST_NS``. At most ``HOLD_MAX`` wait.
Only a live proxy that can ask holds (``Awaiting.can_ask``); a capture replayed is dated as it
goes. The samples and rows are the same as if they had been dated at once, a second later.

Pure: the caller's clock comes in ``due``; nothing here reads one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from ..protocol.events import FetchExchanged
from .model import LatencyModel

HOLD_MAX_NS: Final = 5_000_000_000  # the longest a fetch waits for the broker's answer
REST_NS: Final = 60_000_000_000  # after a wait in vain, how long nothing is held
HOLD_MAX: Final = 10_000  # fetches held at most (the oldest are dated past it)


class Dates(Protocol):
    """What dates a fetch held here (``observer.py``'s ``ConnectionObserver``)."""

    def dated(self, ev: FetchExchanged, proxy_ns: int, unheld: bool, fwd: int, rtt_ns: int) -> None: ...


Held = tuple[Dates, FetchExchanged, int, bool, int, int]  # its connection, and what ``dated`` takes


def awaits(model: LatencyModel, ev: FetchExchanged) -> bool:
    """Whether a consumer fetch's data, at a proxy beside one broker, is of a topic id
    whose name, or of a partition (no produce to it seen here) whose leader, is not known yet:
    who leads it decides how the model dates it. Marks what it meets as wanted."""
    req = ev.request
    if req.replica_id >= 0 or req.share:
        return False
    cluster = model.cluster
    leaders = cluster.leaders
    out = False
    for rp in ev.response.partitions:
        b = rp.batches
        if b is None or not b.batches:
            continue
        key = rp.topic_id or rp.topic or ""
        topic = cluster.topic(key)  # an id without a name is marked wanted
        if (topic, rp.partition) in leaders:
            continue
        if cluster.unnamed_id(key) or (not model.logs.produced(topic, rp.partition)
                                       and cluster.leader_wanted(topic, rp.partition)):
            out = True
    return out


class Awaiting:
    def __init__(self, wants: Callable[[], bool]) -> None:
        self.wants = wants  # the model wants something asked of the broker (ClusterView.wants_topics)
        self.can_ask: Callable[[], bool] = lambda: False  # the proxy asks its broker (set by a live proxy)
        self.held: list[Held] = []
        self._rest_until_ns = 0

    def holds(self, ev: FetchExchanged, model: LatencyModel, broker_node: int) -> bool:
        """Whether this fetch waits: something waits already (the order is kept), or the proxy
        asks its broker and the fetch meets a partition to ask about (``awaits``). Past the rest
        after a wait in vain, nothing waits."""
        if self.held:
            return True
        if broker_node < 0 or ev.t_request_ns < self._rest_until_ns:
            return False
        return awaits(model, ev) and self.can_ask()

    def hold(self, entry: Held) -> None:
        self.held.append(entry)

    def due(self, now_ns: int) -> list[Held]:
        """The fetches to date now, in order: all of them once the broker's answer came (the model
        wants nothing more), or once the oldest waited ``HOLD_MAX_NS`` (then nothing is held for
        ``REST_NS``); the oldest past ``HOLD_MAX``."""
        held = self.held
        if not held:
            return held
        if not self.wants():
            self.held = []
            return held
        if now_ns - held[0][1].t_request_ns >= HOLD_MAX_NS:
            self.held = []
            self._rest_until_ns = now_ns + REST_NS
            return held
        if len(held) > HOLD_MAX:
            out, self.held = held[:len(held) - HOLD_MAX], held[len(held) - HOLD_MAX:]
            return out
        return []

    def all(self) -> list[Held]:
        """Every fetch held, to date now (the proxy stops)."""
        held, self.held = self.held, []
        return held

"""Self-calibration: a sidecar learns its own broker's expiry overshoot from requests of its own.

An expired fetch leaves purgatory after max wait plus the broker's timer lateness, which moves
with the broker, its version and its load (0.5 to 2.2 ms over one day on one machine). A fixed
default is wrong by that much on another broker; the sidecar measures it instead:

every ``PROBE_EVERY_S``, on a connection of its own to its broker (never a client's), for one
partition its broker leads (one the model knows, else one its own Metadata request names):

1. ListOffsets (latest): the partition's high watermark;
2. a Fetch at that offset with max wait 0, which cannot park: its round trip is the base, what
   an empty fetch costs the broker and the loopback between them;
3. the same Fetch with max wait ``PROBE_WAIT_MS``, which parks: when it comes back empty (no
   record arrived meanwhile: it expired), its round trip less the max wait and the base is one
   sample of the overshoot. One that comes back with records was woken: no sample.

The median of the last ``SAMPLES_KEPT`` parked round trips (less max wait) less the median of
their bases is what the model adds to max wait for every expired fetch, from ``MIN_SAMPLES`` on
(the default until then; the first ``WARM_UP_SAMPLES`` are left out: a fresh broker's first
expiries run cold code); ``--expiry-overshoot-ms`` turns the learning off.

Learned in seconds, not minutes: until it holds ``SAMPLES_KEPT`` samples a proxy probes every
``FAST_EVERY_S`` (at most ``FAST_PROBES`` of them), then every ``PROBE_EVERY_S``; with no
partition to probe it looks at what the clients' own Metadata taught the model every
``LOOK_EVERY_S`` (free) and asks its broker itself every ``PROBE_EVERY_S``. At every 30 s alone,
a fresh sidecar kept the 1 ms default for its first three minutes, and a broker whose timer ran
2 ms late had its expired fetches' local time 1 ms too long all that while. Kept to three samples,
a fast start learned 0.9 ms high: one expiry's lateness spreads over a millisecond and more on a
busy broker (the request log: -2.5 to +6.5 ms for the probes of one run), and the median of 3 is
as noisy; of 31, about a third as noisy (the square root of 3/31).

The answers are stamped by the kernel (``proxy/stamps.py``, the reader the proxy's broker
connections use), not read off the clock when the event loop gets to them: a busy sidecar's
loop would make its own parked round trips late (``tests/proxy/test_calibration.py``).

A proxy away from its brokers probes the bootstrap broker the same way (the node its address
belongs to, learned from Metadata): the network is in both round trips and the difference takes
it off. What it learns there stands for every broker it fronts.

Exported as ``fetchlat_broker_expiry_overshoot_seconds`` (what the model uses, learned or set)
and ``fetchlat_calibration_probes_total{result}``. Each kept base is also a fetch answered at
once: the model takes its round trip into what an answer takes the broker to start
(``LatencyModel.learn_first_byte``), by which it dates what it never sees happen (a follower's
wake-up by the end of the leader's append, a follower's high watermark, a commit marker).

``OvershootLearner`` is the pure part (samples in, estimate out, scripted in the tests);
``Calibrator`` does the I/O on the codec (``protocol/``), as ``discovery.py`` does.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from ..protocol import apis
from ..protocol.encoder import encode
from ..protocol.errors import ProtocolError
from ..protocol.framing import frame_size, request_frame
from ..protocol.headers import response_body_start
from ..protocol.walker import walk
from . import clock
from .discovery import BadAnswer, NoAnswer, fetch_topics
from .stamps import StampCounts, StampedReader

if TYPE_CHECKING:
    from ..metrics.model import LatencyModel
    from ..metrics.prom import ProxyMetrics
    from .config import Config
    from .registry import BrokerRegistry

log = logging.getLogger("fetchlat.proxy")

PROBE_EVERY_S: Final = 30.0
FAST_EVERY_S: Final = 0.1  # until the first estimate ...
FAST_PROBES: Final = 60  # ... for at most this many probes (a busy partition wakes them all)
LOOK_EVERY_S: Final = 0.25  # nothing to probe: how often the model's partitions are looked at
PROBE_WAIT_MS: Final = 50
SAMPLES_KEPT: Final = 31
MIN_SAMPLES: Final = 3
# the first expiries a fresh broker (or a fresh JVM's code path) runs are cold: late by several
# ms (a first fetch 7.5 ms late, docs/kafka.md); these first samples are not kept
WARM_UP_SAMPLES: Final = 3
MAX_OVERSHOOT_NS: Final = 20_000_000  # a sample above this is a stall (GC, a paused broker), not the timer
CLIENT_ID: Final = "fetchlat-calibration"
LIST_OFFSETS_VERSION: Final = 7
FETCH_VERSION: Final = 12
NS_PER_MS: Final = 1_000_000


class OvershootLearner:
    """The broker's expiry overshoot from probe pairs: base round trip, parked round trip.

    The estimate is a difference of medians: the parked round trips less max wait, less the base
    round trips. Both carry the same typical work of the broker and the machine, which the
    difference takes off. Taking off the floor of the bases instead (once the rule here) took off
    only the best case: on a loaded machine the bases ran 0.9 ms at best and 2.3 ms at the median
    (the broker's request log), and the overshoot was learned 1.5-2 ms high."""

    def __init__(self) -> None:
        # the parked round trips less max wait, and the base round trips (what an empty fetch
        # that cannot park takes), of the last expired probes
        self.samples: deque[int] = deque(maxlen=SAMPLES_KEPT)
        self.bases: deque[int] = deque(maxlen=SAMPLES_KEPT)
        self.counts = {"expired": 0, "woken": 0, "failed": 0, "stalled": 0}
        self.kept = 0  # pairs kept (past the warm-up, not a stall): their bases are answers' starts
        self._warming = WARM_UP_SAMPLES

    def add(self, *, base_ns: int, parked_ns: int, max_wait_ms: int, records: bool) -> int | None:
        """One probe pair; the sample it gave (ns: the parked round trip less max wait and its
        own base), or None (woken by a record, or a stall)."""
        if records:
            self.counts["woken"] += 1
            return None
        over = parked_ns - max_wait_ms * NS_PER_MS
        sample = over - base_ns
        if not -MAX_OVERSHOOT_NS < sample < MAX_OVERSHOOT_NS:
            self.counts["stalled"] += 1
            return None
        self.counts["expired"] += 1
        if self._warming:
            self._warming -= 1
            return sample
        self.samples.append(over)
        self.bases.append(base_ns)
        self.kept += 1
        return sample

    def failed(self) -> None:
        self.counts["failed"] += 1

    def estimate_ns(self) -> int | None:
        """Median parked round trip less max wait, less the median base (never below 0), once
        there are ``MIN_SAMPLES`` pairs."""
        if len(self.samples) < MIN_SAMPLES:
            return None
        return max(0, int(statistics.median(self.samples) - statistics.median(self.bases)))


def led_partition(leaders: Iterable[tuple[str, int, int]], node_id: int) -> tuple[str, int] | None:
    """A partition ``node_id`` leads, of a topic of the clients' (not an internal ``__`` one),
    from (topic, partition, leader) triples; None: it leads none."""
    return next(((t, p) for t, p, leader in leaders if leader == node_id and not t.startswith("__")), None)


def list_offsets_request(corr: int, topic: str, partition: int) -> bytes:
    body = encode(apis.table()[apis.LIST_OFFSETS].request(), LIST_OFFSETS_VERSION, {
        "ReplicaId": -1, "IsolationLevel": 0, "Topics": [{"Name": topic, "Partitions": [
            {"PartitionIndex": partition, "CurrentLeaderEpoch": -1, "Timestamp": -1}]}]})
    return bytes(request_frame(apis.LIST_OFFSETS, LIST_OFFSETS_VERSION, corr, CLIENT_ID, body))


def fetch_request(corr: int, topic: str, partition: int, offset: int, max_wait_ms: int) -> bytes:
    body = encode(apis.table()[apis.FETCH].request(), FETCH_VERSION, {
        "ReplicaId": -1, "MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": 1 << 16, "IsolationLevel": 0,
        "SessionId": 0, "SessionEpoch": -1, "Topics": [{"Topic": topic, "Partitions": [
            {"Partition": partition, "CurrentLeaderEpoch": -1, "FetchOffset": offset, "LastFetchedEpoch": -1,
             "LogStartOffset": -1, "PartitionMaxBytes": 1 << 16}]}],
        "ForgottenTopicsData": [], "RackId": ""})
    return bytes(request_frame(apis.FETCH, FETCH_VERSION, corr, CLIENT_ID, body))


class ProbeFailed(Exception):
    """A probe's answer was an error, or not the answer expected; the message says which."""


class _Line(asyncio.Protocol):
    """The probe's own connection: frames in, each with the time its last packet arrived (the
    kernel's, through ``StampedReader``; the clock where there is none)."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport instances
        self.buf = bytearray()
        self.t_ns = 0
        self.answer: asyncio.Future[tuple[bytes, int]] | None = None
        self.reader: StampedReader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:  # only where no stamped reader took over
        self.got(data, clock.now_ns())

    def got(self, data: bytes, t_ns: int) -> None:
        self.buf += data
        self.t_ns = t_ns
        if len(self.buf) < 4 or self.answer is None or self.answer.done():
            return
        size = frame_size(bytes(self.buf[:4]), self.max_frame_bytes, "calibration response")
        if len(self.buf) >= 4 + size:
            body = bytes(self.buf[4:4 + size])
            del self.buf[:4 + size]
            self.answer.set_result((body, self.t_ns))

    def lost(self, exc: BaseException | None = None) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(exc or ConnectionError("the broker closed the probe's connection"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reader is not None:
            self.reader.stop()
        self.lost(exc)

    def eof_received(self) -> bool | None:
        self.lost()
        return None

    async def call(self, frame: bytes) -> tuple[bytes, int, int]:
        """Send a request frame; its answer's body, when the request went, when the answer came."""
        assert self.transport is not None
        self.answer = asyncio.get_running_loop().create_future()
        t0 = clock.now_ns()
        self.transport.write(frame)
        body, t1 = await self.answer
        return body, t0, t1


class Calibrator:
    """The probe loop of one proxy: its broker is ``upstream``, whose node id ``node_of`` gives
    (``BrokerRegistry.node_at``: a sidecar's node, or the node Metadata advertised at that
    address; None until then)."""

    def __init__(self, upstream: tuple[str, int], leaders: Callable[[], Iterable[tuple[str, int, int]]],
                 learned: Callable[[int], None], *, node_of: Callable[[], int | None], max_frame_bytes: int,
                 connect_timeout_s: float, answered: Callable[[int], None] | None = None,
                 every_s: float = PROBE_EVERY_S, wait_ms: int = PROBE_WAIT_MS, kernel_stamps: bool = True) -> None:
        self.upstream = upstream
        self.leaders = leaders  # (topic, partition, leader) of the partitions the model knows
        self.node_of = node_of
        self.learned = learned
        self.answered = answered  # each kept base: a fetch answered at once, its round trip
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout_s = connect_timeout_s
        self.every_s = every_s
        self.wait_ms = wait_ms
        self.kernel_stamps = kernel_stamps
        self.learner = OvershootLearner()
        self._corr = 0
        self._fast_left = FAST_PROBES

    def next_wait_s(self) -> float:
        """After a probe: fast until the samples kept are full (a bounded number of times), then slow."""
        if len(self.learner.samples) < SAMPLES_KEPT and self._fast_left > 0:
            self._fast_left -= 1
            return min(FAST_EVERY_S, self.every_s)
        return self.every_s

    async def run(self) -> None:
        every_ns = int(self.every_s * 1e9)
        asked_at: int | None = None  # when the probe last asked its broker which partitions it leads
        while True:
            node = self.node_of()
            target = led_partition(self.leaders(), node) if node is not None else None
            now = clock.now_ns()
            if target is None and (node is None or (asked_at is not None and now - asked_at < every_ns)):
                await asyncio.sleep(min(LOOK_EVERY_S, self.every_s))  # the clients' Metadata may name one soon
                continue
            if target is None:
                asked_at = now
            try:
                await asyncio.wait_for(self.probe(target), self.connect_timeout_s + self.wait_ms / 1000 + 5)
            except (OSError, TimeoutError, ProbeFailed, ProtocolError, asyncio.IncompleteReadError, BadAnswer,
                    NoAnswer) as exc:
                self.learner.failed()
                log.debug("calibration probe failed: %s", exc or "timeout")
            await asyncio.sleep(self.next_wait_s())

    async def probe(self, target: tuple[str, int] | None) -> int | None:
        """One probe pair on a connection of its own, of ``target`` or (None) of a partition the
        broker's own Metadata says it leads; the sample it gave, if any."""
        if target is None:
            node = self.node_of()
            _, leaders = await fetch_topics(*self.upstream, max_frame_bytes=self.max_frame_bytes)
            target = led_partition(leaders, node) if node is not None else None
            if target is None:
                return None  # the broker leads no partition yet: nothing to probe
        loop = asyncio.get_running_loop()
        line = _Line(self.max_frame_bytes)
        transport, _ = await asyncio.wait_for(loop.create_connection(lambda: line, *self.upstream),
                                              self.connect_timeout_s)
        if self.kernel_stamps:
            line.reader = StampedReader.open(loop, transport, StampCounts(), line.got, line.lost, line.lost)
        try:
            async def call(key: int, version: int, frame: bytes) -> tuple[Any, int]:
                body, t0, t1 = await line.call(frame)
                start = response_body_start(key, version, body)
                return walk(apis.table()[key].response(), version, body, start), t1 - t0

            topic, partition = target

            self._corr += 1
            offsets, _ = await call(apis.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                                    list_offsets_request(self._corr, topic, partition))
            part = offsets["Topics"][0]["Partitions"][0]
            if part["ErrorCode"] != 0:
                raise ProbeFailed(f"ListOffsets error {part['ErrorCode']}")
            offset = part["Offset"]
            times: list[int] = []
            records = False
            for wait_ms in (0, self.wait_ms):
                self._corr += 1
                answer, took_ns = await call(apis.FETCH, FETCH_VERSION,
                                             fetch_request(self._corr, topic, partition, offset, wait_ms))
                times.append(took_ns)
                parts = answer["Responses"][0]["Partitions"] if answer["Responses"] else []
                # a broker may leave out a partition it has nothing for (Tansu does, for a fetch
                # that cannot park): answered, no records
                if answer["ErrorCode"] != 0 or any(fp["ErrorCode"] != 0 for fp in parts):
                    raise ProbeFailed("Fetch answered with an error")
                spans = [fp["Records"] for fp in parts]  # the walker's Spans of the records' bytes, or None
                records = any(span is not None and span.end > span.start for span in spans)
        finally:
            if line.reader is not None:
                line.reader.stop()
            transport.close()
        kept = self.learner.kept
        sample = self.learner.add(base_ns=times[0], parked_ns=times[1], max_wait_ms=self.wait_ms, records=records)
        if self.answered is not None and self.learner.kept > kept:
            self.answered(times[0])
        estimate = self.learner.estimate_ns()
        if estimate is not None:
            self.learned(estimate)
        return sample


class OvershootLog:
    """Each new estimate to the model; the log says so once it is 0.1 ms or more from the figure
    the log last said (so what the model used is always within 0.1 ms of a logged one)."""

    def __init__(self, model: LatencyModel, logged_ns: int) -> None:
        self.model = model
        self.logged_ns = logged_ns

    def __call__(self, ns: int) -> None:
        if abs(ns - self.logged_ns) >= 100_000:
            log.info("learned the broker's expiry overshoot: %.2f ms (was %.2f ms)", ns / 1e6, self.logged_ns / 1e6)
            self.logged_ns = ns
        self.model.expiry_overshoot_ns = ns


def calibrator_for(cfg: Config, model: LatencyModel, registry: BrokerRegistry, metrics: ProxyMetrics,
                   kernel_stamps: bool) -> Calibrator | None:
    """The proxy's calibrator, unless the overshoot was set (``--expiry-overshoot-ms``): a
    sidecar's probes its own broker, a proxy away from its brokers the bootstrap broker; what it
    learns goes to ``model`` (``OvershootLog``), its probe counts to ``fetchlat_calibration_probes_total``."""
    if cfg.expiry_overshoot_ms is not None:
        return None
    bootstrap = cfg.upstreams[0]
    # the leaders the model knows, read each round (a full answer replaces the view's map)
    calibrator = Calibrator(bootstrap, lambda: ((t, p, lead) for (t, p), lead in model.cluster.leaders.items()),
                            OvershootLog(model, cfg.expiry_overshoot_ns), node_of=lambda: registry.node_at(bootstrap),
                            max_frame_bytes=cfg.max_frame_bytes, connect_timeout_s=cfg.connect_timeout_s,
                            answered=model.learn_first_byte, every_s=cfg.calibration_every_s,
                            kernel_stamps=kernel_stamps)
    learner = calibrator.learner
    metrics.calibration.counts = lambda: dict(learner.counts)
    return calibrator

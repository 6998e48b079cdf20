"""The latency model: how long a fetch really took once the purgatory wait is taken out.

Pure: events and timestamps in (monotonic ns, scripted in tests), samples out. What the proxy
has learned of each partition (log ends from fetch and produce traffic, produce append times,
follower progress) is ``partitions.py``'s, which it reads and feeds. Must never: read clocks,
touch sockets or Prometheus.

Timestamps at the proxy (monotonic ns): t_request = request forwarded upstream, t_first /
t_last = first / last response byte. total = t_last - t_request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from ..protocol.events import FetchExchanged, ProduceExchanged
from ..protocol.fetch import FetchPartitionResponse
from ..protocol.produce import ProduceRequestInfo
from ..protocol.sessions import TopicKey
from .broker_timing import answer_ns, park_ns
from .cluster import ClusterView
from .partitions import PRODUCE_SEEN, PartitionLogs
from .vocabulary import Kind, Outcome, WaitSource, fetch_kind

NS_PER_MS: Final = 1_000_000
# A fetch answered this close to (or after) max_wait with too little data ran to expiry.
EXPIRY_SLACK_NS: Final = 2 * NS_PER_MS
# An expired fetch leaves purgatory after max_wait plus the broker's timer lateness: Apache
# Kafka's purgatory timer ticks in whole milliseconds (a 1 ms timing wheel polled through a
# DelayQueue that waits whole ms), so it fires one tick late on average, plus the expiry's
# own work. Measured against Kafka 4.4's request log (docs/latency-model.md): remoteTimeMs -
# maxWaitMs of expired fetches p10/p50/p90 0.48/1.29/1.67 ms. Configurable (expiry_overshoot_ms).
DEFAULT_EXPIRY_OVERSHOOT_NS: Final = 1 * NS_PER_MS
# A consumer fetch a follower serves (KIP-392) sees data once the follower's high watermark
# moves, which only the leader's side of replication shows; its sidecar dates that from the
# response: the first byte, less what an answer takes the broker to start (learned from fetches
# answered at once; this until then).
DEFAULT_FIRST_BYTE_NS: Final = 300_000
# Away from its brokers, a proxy dates a produce's append by its answer less the round trip
# (``RoundTrips``): the shortest of the last ROUND_TRIPS_KEPT requests the brokers answer
# without waiting, once ROUND_TRIPS_TO_TRUST were seen; before, by its forwarding.
ROUND_TRIPS_KEPT: Final = 32
ROUND_TRIPS_TO_TRUST: Final = 4
REPLICA_HW: Final = "replica_high_watermark"
TXN_MARKER: Final = "transaction_marker"  # read_committed: the same dating, for a commit marker
# A follower is woken when the leader's append ends, which a sidecar never sees under acks=all
# (the answer waits for the followers): its data is dated no earlier than its answer, less what
# an answer takes the broker to start, nor earlier than the produce's turn began
APPEND_END: Final = "append_end"

IMMEDIATE, WOKEN, EXPIRED, ERROR, UNKNOWN = (Outcome.IMMEDIATE, Outcome.WOKEN, Outcome.EXPIRED, Outcome.ERROR,
                                             Outcome.UNKNOWN)
OUTCOMES: Final = tuple(Outcome)
REPORTED, INFERRED = WaitSource.REPORTED, WaitSource.INFERRED


@dataclass(slots=True, kw_only=True)
class WaitEstimate:
    wait_ns: int
    source: WaitSource
    outcome: Outcome
    basis: str  # what decided it (see estimate_wait)
    confident: bool
    arrival_ns: int | None = None  # when the data that woke the fetch arrived (woken)

    def __init__(self, *, wait_ns: int, source: WaitSource, outcome: Outcome, basis: str, confident: bool,
                 arrival_ns: int | None = None) -> None:
        self.wait_ns = wait_ns
        self.source = source
        self.outcome = outcome
        self.basis = basis
        self.confident = confident
        self.arrival_ns = arrival_ns


def estimate_wait(
    *,
    max_wait_ms: int,
    min_bytes: int,
    total_ns: int,
    t_request_ns: int,
    error: bool,
    returned_bytes: int,
    reported_wait_ms: int | None = None,
    data_at_request: bool = False,
    arrival_ns: int | None = None,
    arrival_basis: str | None = None,
    expiry_overshoot_ns: int = 0,
    woken_until_ns: int | None = None,
) -> WaitEstimate:
    """The purgatory wait of one fetch. In order of preference:

    1. ``reported``: the broker said (WaitTimeMs, KIP-736): used as is, clamped to [0, total].
    2. ``error``: an erroring fetch is answered at once: wait 0.
    3. ``max_wait_ms <= 0``: the fetch cannot park: ``immediate``, wait 0.
    4. enough data came back (``returned_bytes >= min_bytes``):
       - the proxy knew data lay beyond the fetch offset when the request went out
         (high watermark / produce acks seen before): ``immediate``, wait 0;
       - the data's arrival is known (produce seen by the proxy, else LogAppendTime, else
         CreateTime): at or before the request: ``immediate``; after it: ``woken``, wait =
         arrival (or ``woken_until_ns``, when the broker counts a woken fetch parked until then,
         if later) - request, clamped to [0, min(max_wait, total)];
       - otherwise ``unknown``, wait 0 (local is then an upper bound), low confidence.
    5. too little data came back:
       - total reached max_wait (within ``EXPIRY_SLACK_NS``): ``expired``, wait = max_wait
         plus the broker's expiry overshoot (``expiry_overshoot_ns``; never more than total);
       - answered early with too little data: ``unknown``, wait 0, low confidence.
    """
    max_wait_ns = max(0, max_wait_ms) * NS_PER_MS
    if reported_wait_ms is not None:
        wait = min(max(0, reported_wait_ms * NS_PER_MS), total_ns)
        if wait == 0:
            outcome = IMMEDIATE
        elif wait >= max_wait_ns:
            outcome = EXPIRED
        else:
            outcome = WOKEN
        return WaitEstimate(wait_ns=wait, source=REPORTED, outcome=outcome, basis="reported", confident=True)
    if error:
        return WaitEstimate(wait_ns=0, source=INFERRED, outcome=ERROR, basis="error", confident=True)
    if max_wait_ms <= 0:
        return WaitEstimate(wait_ns=0, source=INFERRED, outcome=IMMEDIATE, basis="max_wait<=0", confident=True)
    if returned_bytes >= max(min_bytes, 0) and (returned_bytes > 0 or min_bytes <= 0):
        if data_at_request or min_bytes <= 0:
            return WaitEstimate(wait_ns=0, source=INFERRED, outcome=IMMEDIATE, basis="known_log_end", confident=True)
        if arrival_ns is not None:
            basis = arrival_basis or "arrival"
            confident = basis in ("produce_seen", "log_append_time")
            if arrival_ns <= t_request_ns:
                return WaitEstimate(wait_ns=0, source=INFERRED, outcome=IMMEDIATE, basis=basis, confident=confident)
            end = arrival_ns if woken_until_ns is None else max(arrival_ns, woken_until_ns)
            wait = min(end - t_request_ns, max_wait_ns, total_ns)
            return WaitEstimate(wait_ns=wait, source=INFERRED, outcome=WOKEN, basis=basis, confident=confident,
                                arrival_ns=arrival_ns)
        return WaitEstimate(wait_ns=0, source=INFERRED, outcome=UNKNOWN, basis="no_arrival", confident=False)
    if total_ns >= max_wait_ns - EXPIRY_SLACK_NS:
        return WaitEstimate(wait_ns=min(max_wait_ns + expiry_overshoot_ns, total_ns), source=INFERRED,
                            outcome=EXPIRED, basis="expired", confident=True)
    return WaitEstimate(wait_ns=0, source=INFERRED, outcome=UNKNOWN, basis="early_without_data", confident=False)


@dataclass(slots=True, kw_only=True)
class PartitionSample:
    topic: str
    partition: int
    fetch_offset: int
    high_watermark: int
    error_code: int
    records: int
    bytes: int
    record_latency_ns: int | None  # KIP-489: response time - newest batch max timestamp

    def __init__(self, *, topic: str, partition: int, fetch_offset: int, high_watermark: int, error_code: int,
                 records: int, bytes: int, record_latency_ns: int | None) -> None:
        self.topic = topic
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.high_watermark = high_watermark
        self.error_code = error_code
        self.records = records
        self.bytes = bytes
        self.record_latency_ns = record_latency_ns


@dataclass(slots=True, kw_only=True)
class FetchSample:
    kind: Kind  # consumer | follower
    replica_id: int
    client_id: str | None
    api_version: int
    max_wait_ms: int
    min_bytes: int
    request_bytes: int
    response_bytes: int
    records: int
    error_code: int
    throttle_ms: int
    total_ns: int
    first_byte_ns: int  # request forwarded -> first response byte
    transfer_ns: int  # first -> last response byte
    wait_ns: int
    wait_source: WaitSource
    outcome: Outcome
    basis: str
    confident: bool
    local_ns: int  # TotalLocalTime = total - wait
    e2e_ns: int  # local + proxy time + client-leg RTT
    wake_lag_ns: int | None  # woken: data arrival -> first response byte
    partitions: tuple[PartitionSample, ...]

    def __init__(self, *, kind: Kind, replica_id: int, client_id: str | None, api_version: int, max_wait_ms: int,
                 min_bytes: int, request_bytes: int, response_bytes: int, records: int, error_code: int,
                 throttle_ms: int, total_ns: int, first_byte_ns: int, transfer_ns: int, wait_ns: int,
                 wait_source: WaitSource, outcome: Outcome, basis: str, confident: bool, local_ns: int, e2e_ns: int,
                 wake_lag_ns: int | None, partitions: tuple[PartitionSample, ...]) -> None:
        self.kind = kind
        self.replica_id = replica_id
        self.client_id = client_id
        self.api_version = api_version
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.request_bytes = request_bytes
        self.response_bytes = response_bytes
        self.records = records
        self.error_code = error_code
        self.throttle_ms = throttle_ms
        self.total_ns = total_ns
        self.first_byte_ns = first_byte_ns
        self.transfer_ns = transfer_ns
        self.wait_ns = wait_ns
        self.wait_source = wait_source
        self.outcome = outcome
        self.basis = basis
        self.confident = confident
        self.local_ns = local_ns
        self.e2e_ns = e2e_ns
        self.wake_lag_ns = wake_lag_ns
        self.partitions = partitions

    @property
    def throttled(self) -> bool:
        return self.throttle_ms > 0


@dataclass(slots=True, kw_only=True)
class ProduceSample:
    client_id: str | None
    acks: int
    api_version: int
    records: int  # in the request
    accepted: int  # of those, in partitions the broker answered without error (all of them for acks=0)
    request_bytes: int
    error_code: int
    total_ns: int | None  # None for acks=0 (no response)
    throttle_ms: int  # the quota delay the broker asked of the producer (0 for acks=0)
    partitions: tuple[tuple[str, int, int, int], ...]  # topic, partition, base offset, records

    def __init__(self, *, client_id: str | None, acks: int, api_version: int, records: int, accepted: int,
                 request_bytes: int, error_code: int, total_ns: int | None, throttle_ms: int,
                 partitions: tuple[tuple[str, int, int, int], ...]) -> None:
        self.client_id = client_id
        self.acks = acks
        self.api_version = api_version
        self.records = records
        self.accepted = accepted
        self.request_bytes = request_bytes
        self.error_code = error_code
        self.total_ns = total_ns
        self.throttle_ms = throttle_ms
        self.partitions = partitions


@dataclass(slots=True, kw_only=True)
class ReplicationSample:
    follower: int
    topic: str
    partition: int
    latency_ns: int  # produce append at the leader -> follower fetch confirming it

    def __init__(self, *, follower: int, topic: str, partition: int, latency_ns: int) -> None:
        self.follower = follower
        self.topic = topic
        self.partition = partition
        self.latency_ns = latency_ns


class RoundTrips:
    """The round trip to the brokers, as a proxy away from them sees it: the shortest of the
    last ``ROUND_TRIPS_KEPT`` requests they answer without waiting (fetches answered at once, and
    what the observer names in ``ROUND_TRIP_APIS``: ApiVersions, Metadata, ...), each forwarded
    to a connection with nothing before it (``ConnectionObserver``: an answer that waited in the
    broker's socket behind another comes right after that one's, a round trip short). No answer comes
    faster than the network carries it, and a slow one (a busy broker, a queue on the way) only
    adds: the shortest is the network's (as TCP's own minimum RTT). Across the tests' 2 x 10 ms
    relay the lower quartile of such answers was 22.9 ms, above most produces' own round trips
    (20.7-22 ms, their append included), while the shortest was within 0.2 ms of the relay's
    20 ms. -1 until ``ROUND_TRIPS_TO_TRUST`` were seen; one for every broker of the proxy (a
    central proxy's brokers sit in one network)."""

    def __init__(self) -> None:
        self._recent: deque[int] = deque(maxlen=ROUND_TRIPS_KEPT)
        self._shortest = -1  # the estimate, kept as the window moves: every answer asks for it

    def add(self, ns: int) -> None:
        recent = self._recent
        gone = recent[0] if len(recent) == ROUND_TRIPS_KEPT else -1  # the one this append pushes out
        recent.append(ns)
        if len(recent) < ROUND_TRIPS_TO_TRUST:
            return
        if self._shortest < 0 or gone == self._shortest:  # trusted from now, or the shortest may have left
            self._shortest = min(recent)
        elif ns < self._shortest:
            self._shortest = ns

    def estimate(self) -> int:
        """The shortest of the recent round trips, -1 until enough were seen. O(1): a proxy away
        from its brokers asks for it on every answer (``broker_frame_ns``); a ``min`` over the
        window each time was a tenth of an ApiVersions round trip's instructions
        (``bench/instr_round_trips.py``)."""
        return self._shortest


class LatencyModel:
    """Per-proxy state and the samples each exchange yields."""

    def __init__(self, *, wall_minus_mono_ns: int, expiry_overshoot_ns: int = DEFAULT_EXPIRY_OVERSHOOT_NS,
                 beside_broker: bool = False) -> None:
        self.wall_minus_mono_ns = wall_minus_mono_ns
        self.expiry_overshoot_ns = expiry_overshoot_ns
        # a sidecar: the broker is on loopback, so a produce's acknowledgement dates its append
        self.beside_broker = beside_broker
        self.cluster = ClusterView()  # topic names by id, partition leaders
        self.logs = PartitionLogs()  # what is known of each partition's log (partitions.py)
        self.first_byte_ns = DEFAULT_FIRST_BYTE_NS  # an immediate answer's first byte, smoothed
        self.round_trips = RoundTrips()  # to the brokers, for a proxy away from them

    # --------------------------------------------------------------------- knowledge
    def learn_every_topic(self, topics: tuple[tuple[str, TopicKey], ...],
                          leaders: tuple[tuple[str, int, int], ...]) -> int:
        """A Metadata answer naming every topic the broker has: the cluster view takes it, and
        what the model holds of partitions of any other topic (deleted since) goes. Returns how
        many partitions went."""
        self.cluster.learn_topic_ids(topics, everything=True)
        self.cluster.learn_leaders(leaders, everything=True)
        return self.logs.keep_topics({name for name, _ in topics} | {t for t, _, _ in leaders})

    @property
    def partitions_held(self) -> int:
        return len(self.logs)

    @property
    def appends_held(self) -> int:
        return self.logs.appends_held

    def _mono(self, wall_ms: int) -> int:
        return wall_ms * NS_PER_MS - self.wall_minus_mono_ns

    # --------------------------------------------------------------------- produce
    def on_produce_sent(self, req: ProduceRequestInfo, t_ns: int) -> None:
        """A produce with records went upstream at ``t_ns`` and awaits its answer (acks != 0)."""
        for p in req.partitions:
            if p.batches is not None and p.batches.records:
                self.logs.sent(self.cluster.topic(p.topic_id or p.topic or ""), p.partition, t_ns, p.batches.records)

    def on_produce(self, ev: ProduceExchanged) -> ProduceSample:
        req, resp = ev.request, ev.response
        if resp is not None:  # answered: it and every produce sent before it are no longer pending
            for p in req.partitions:
                self.logs.answered(self.cluster.topic(p.topic_id or p.topic or ""), p.partition, ev.t_request_ns)
        name = self.cluster.topic
        counts = {(name(p.topic_id or p.topic or ""), p.partition): (p.batches.records if p.batches else 0)
                  for p in req.partitions}
        parts: list[tuple[str, int, int, int]] = []
        error = 0
        accepted = req.records if resp is None else 0  # a rejected batch (a client retries it) is not produced
        if resp is not None:
            for rp in resp.partitions:
                topic = self.cluster.topic(rp.topic_id or rp.topic or "")
                n = counts.get((topic, rp.partition), 0)
                error = error or rp.error_code
                parts.append((topic, rp.partition, rp.base_offset, n))
                if rp.error_code == 0:
                    accepted += n
                if rp.error_code == 0 and rp.base_offset >= 0 and n > 0:
                    self.logs.appended(topic, rp.partition, rp.base_offset + n, ev.t_request_ns,
                                       self._appended_by(ev.t_request_ns, ev.t_first_ns) if req.acks != 0 else -1)
        return ProduceSample(client_id=ev.client_id, acks=req.acks, api_version=ev.api_version, records=req.records,
                             accepted=accepted, request_bytes=ev.request_bytes, error_code=error,
                             total_ns=None if resp is None else ev.t_last_ns - ev.t_request_ns,
                             throttle_ms=0 if resp is None else resp.throttle_time_ms, partitions=tuple(parts))

    def _appended_by(self, forwarded_ns: int, answer_ns: int) -> int:
        """When the broker had appended a produce whose answer's first byte came at ``answer_ns``,
        on the proxy's clock of fetches it forwards (-1: not known, the forwarding dates it).

        Beside the broker (a sidecar, a capture on the broker host) the answer comes within
        microseconds of the append: ``answer_ns``. Away from it the answer comes back a round
        trip after the append, and a fetch reached the broker's purgatory half a round trip after
        it was forwarded: the answer less the round trip learned (``RoundTrips``), never before
        the produce was forwarded. The forwarding alone dates a consumer's data early by the
        produce's own time in the broker: 2.05 ms at p50 against Kafka's request log across a
        2 x 10 ms relay (docs/kafka.md)."""
        if self.beside_broker:
            return answer_ns
        rtt = self.round_trips.estimate()
        return -1 if rtt < 0 else max(forwarded_ns, answer_ns - rtt)

    def broker_frame_ns(self, seen_ns: int) -> int:
        """A moment the broker acted (it sent an answer) that the proxy saw at ``seen_ns``, on the
        clock of the requests the proxy forwards, where a request's forwarding stands for its
        arrival. Beside the broker: as seen. Away from it: a round trip earlier (``RoundTrips``),
        when a request forwarded would have reached the broker as it acted; as seen until the
        round trip is learned. A request pipelined behind that answer starts there: timed from
        the answer as seen, away from the broker it lost a whole round trip of its time at the
        broker (its wait against Kafka's request log short by 22.9-23.9 ms across a 2 x 10 ms
        relay, docs/kafka.md)."""
        if self.beside_broker:
            return seen_ns
        rtt = self.round_trips.estimate()
        return seen_ns if rtt < 0 else seen_ns - rtt

    def learn_first_byte(self, ns: int) -> None:
        """A fetch answered at once had its first byte ``ns`` after it was forwarded (the
        clients' fetches the model knows were immediate, and the calibration's fetches that
        cannot park): smoothed into ``first_byte_ns``, what an answer takes the broker to start."""
        self.first_byte_ns += (ns - self.first_byte_ns) // 16

    def learn_round_trip(self, ns: int) -> None:
        """A request the broker answers without waiting took ``ns`` from forwarding to answer."""
        self.round_trips.add(ns)

    # --------------------------------------------------------------------- fetch
    def on_fetch(self, ev: FetchExchanged, *, proxy_ns: int = 0, client_rtt_ns: int = 0, broker_node: int = -1
                 ) -> tuple[FetchSample, list[ReplicationSample]]:
        req, resp = ev.request, ev.response
        total = ev.t_last_ns - ev.t_request_ns
        returned_bytes = resp.records_bytes
        follower = req.replica_id if req.replica_id >= 0 else None
        read_committed = req.isolation_level == 1
        share = req.share

        data_at_request = False
        arrival: int | None = None
        arrival_basis: str | None = None
        replication: list[ReplicationSample] = []
        offsets = ({(self.cluster.topic(t), p): off for t, p, off in ev.covered} if not share
                   else self._acquired(resp.partitions, broker_node))
        logs = self.logs
        for (topic, part), off in offsets.items():
            st = logs.get(topic, part)
            visible_end = st.stable_end if read_committed and st.stable_end >= 0 else st.log_end
            if visible_end > off and st.log_end_t_ns <= ev.t_request_ns:
                data_at_request = True
            if follower is not None:
                replication += [ReplicationSample(follower=follower, topic=topic, partition=part, latency_ns=ns)
                                for ns in st.confirm(follower, off, ev.t_request_ns)]
                if broker_node >= 0:
                    self.cluster.leaders[(topic, part)] = broker_node  # followers fetch from the leader

        part_samples: list[PartitionSample] = []
        records = 0
        for rp in resp.partitions:
            topic = self.cluster.topic(rp.topic_id or rp.topic or "")
            st = logs.get(topic, rp.partition)
            b = rp.batches
            n = (b.records if b is not None else 0) if not share else rp.acquired
            records += n
            rec_lat = None
            if b is not None and b.batches:
                off = offsets.get((topic, rp.partition), b.first_offset)
                a, basis = self._arrival(st.arrival(off, follower is not None, ev.t_first_ns), b.first_timestamp_ms,
                                         b.log_append_time)
                # data made visible by something the proxy never sees is dated by the answer:
                # a follower's high watermark (KIP-392), a transaction's commit marker, which
                # the coordinator writes, for records a read_committed fetch could not see yet,
                # or the end of the leader's append that wakes a follower
                unseen = (APPEND_END if follower is not None
                          else REPLICA_HW if not share and basis != "produce_seen"
                          and self.cluster.led_elsewhere(topic, rp.partition, broker_node)
                          else TXN_MARKER if read_committed and b.control_batches and 0 <= st.stable_end <= off
                          else None)
                if unseen is not None:
                    answered = ev.t_first_ns - self.first_byte_ns
                    if a is None or a < answered:
                        a, basis = answered, unseen
                if a is not None and (arrival is None or a < arrival):
                    arrival, arrival_basis = a, basis
                if follower is None and b.max_timestamp_ms >= 0:
                    rec_lat = ev.t_last_ns + self.wall_minus_mono_ns - b.max_timestamp_ms * NS_PER_MS
            if rp.error_code == 0 and rp.high_watermark > st.log_end:
                st.log_end, st.log_end_t_ns = rp.high_watermark, ev.t_first_ns
            if rp.error_code == 0 and rp.last_stable_offset >= 0:
                st.stable_end = rp.last_stable_offset
            part_samples.append(PartitionSample(
                topic=topic, partition=rp.partition, fetch_offset=offsets.get((topic, rp.partition), -1),
                high_watermark=rp.high_watermark, error_code=rp.error_code, records=n,
                bytes=b.size_bytes if b is not None else 0, record_latency_ns=rec_lat))

        errored = resp.error_code != 0 or (bool(resp.partitions) and all(p.error_code for p in resp.partitions))
        # its wait runs from its park until its answer is ready, as the broker counts it (broker_timing.py)
        kind = fetch_kind(req.replica_id, share)
        parked_ns = ev.t_request_ns + park_ns(kind, req.acknowledgements > 0)
        lead = answer_ns(kind)
        # (only a fetch whose data's arrival is known can be woken: the others need no answer date)
        answer_ready = None if lead is None or arrival is None else self.broker_frame_ns(ev.t_first_ns) - lead
        w = estimate_wait(max_wait_ms=req.max_wait_ms, min_bytes=req.min_bytes, total_ns=total,
                          t_request_ns=parked_ns, error=errored,
                          returned_bytes=returned_bytes,
                          reported_wait_ms=resp.wait_time_ms, data_at_request=data_at_request,
                          arrival_ns=arrival, arrival_basis=arrival_basis,
                          expiry_overshoot_ns=self.expiry_overshoot_ns,
                          # the data dates the wake (the outcome, the wake lag), the answer the wait's end
                          woken_until_ns=answer_ready)
        if w.outcome == IMMEDIATE and w.basis == "known_log_end" and not share:
            # (a share fetch's answer also holds the broker's share work: not the start of an answer)
            self.learn_first_byte(ev.t_first_ns - ev.t_request_ns)
        local = total - w.wait_ns
        error_code = resp.error_code or next((p.error_code for p in resp.partitions if p.error_code), 0)
        sample = FetchSample(
            kind=kind, replica_id=req.replica_id, client_id=ev.client_id,
            api_version=ev.api_version,
            max_wait_ms=req.max_wait_ms, min_bytes=req.min_bytes, request_bytes=ev.request_bytes,
            response_bytes=ev.response_bytes, records=records, error_code=error_code,
            throttle_ms=resp.throttle_time_ms, total_ns=total, first_byte_ns=ev.t_first_ns - ev.t_request_ns,
            transfer_ns=ev.t_last_ns - ev.t_first_ns, wait_ns=w.wait_ns, wait_source=w.source, outcome=w.outcome,
            basis=w.basis, confident=w.confident, local_ns=local, e2e_ns=local + proxy_ns + client_rtt_ns,
            wake_lag_ns=(ev.t_first_ns - w.arrival_ns) if w.arrival_ns is not None else None,
            partitions=tuple(part_samples))
        return sample, replication

    def _acquired(self, parts: tuple[FetchPartitionResponse, ...], broker_node: int) -> dict[tuple[str, int], int]:
        """A share fetch names no offset: the broker acquires records for its member from where
        the share partition stands. The first offset acquired plays the fetch offset's part: the
        data was there when the request went out if the log was known to reach past it, and
        otherwise it is dated by its append. Only a partition's leader serves a share fetch."""
        out: dict[tuple[str, int], int] = {}
        for rp in parts:
            topic = self.cluster.topic(rp.topic_id or rp.topic or "")
            if rp.acquired_first >= 0:
                out[(topic, rp.partition)] = rp.acquired_first
            if rp.error_code == 0 and broker_node >= 0:
                self.cluster.leaders[(topic, rp.partition)] = broker_node
        return out

    def _arrival(self, seen: int | None, first_ts_ms: int, log_append: bool) -> tuple[int | None, str | None]:
        """When the first data a fetch gets could wake it: by the appends seen (``seen``,
        ``PartitionLog.arrival``), else by its first batch's timestamp (the broker's clock for
        LogAppendTime, the producer's for CreateTime), else not known."""
        if seen is not None:
            return seen, PRODUCE_SEEN
        if first_ts_ms >= 0:
            return self._mono(first_ts_ms), "log_append_time" if log_append else "create_time"
        return None, None

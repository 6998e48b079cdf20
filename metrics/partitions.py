"""What the proxy has learned of each partition's log: where it ends (from fetch answers and
produce acknowledgements), the appends it saw with when each began and was acknowledged, the
produces in flight, and how far each follower has confirmed. ``model.py`` dates a fetch's data
by it (``PartitionLog.arrival``) and times replication (``PartitionLog.confirm``).

Bounded: at most ``MAX_PARTITIONS`` partitions (the oldest go first), ``MAX_APPENDS_PER_PARTITION``
appends each, and appends older than ``APPEND_HORIZON_NS`` that every follower seen holds are
let go (``trim``). Pure, as the model: no clocks, sockets or Prometheus.
"""

from __future__ import annotations

import bisect
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from .cluster import MAX_PARTITIONS

MAX_APPENDS_PER_PARTITION: Final = 4096
# A partition's appends are let go once older than this and held by every follower seen fetching
# it: a fetch in flight is dated by an append after its request (max wait is seconds), and a
# follower's replication latency by the appends it had not confirmed, which stay (up to the bound
# above) for as long as it lags. Without it a busy partition kept its last 4 096 for good.
APPEND_HORIZON_NS: Final = 60 * 1_000_000_000
TRIM_EVERY: Final = 64  # appends between two looks at what can go
MAX_PENDING_PER_PARTITION: Final = 64  # produces in flight to one partition (5 per producer by default)
PRODUCE_SEEN: Final = "produce_seen"  # the basis of a date the appends give


def _int64s() -> array[int]:
    return array("q")


@dataclass(slots=True)
class PartitionLog:
    log_end: int = -1  # highest next offset known to exist
    log_end_t_ns: int = 0
    stable_end: int = -1  # last stable offset (read_committed readers see up to here)
    # Three columns of int64 (8 bytes an entry, not a 32-byte int object and its 8-byte slot
    # each): as lists of ints they held ~0.45 MB for every partition a sidecar ever led (the
    # ninth soak, docs/reliability.md); ``trim`` decides what goes.
    append_ends: array[int] = field(default_factory=_int64s)  # end offsets of appends seen, ascending
    append_times: array[int] = field(default_factory=_int64s)  # the produce forwarded (the append begins)
    append_acks: array[int] = field(default_factory=_int64s)  # its response's first byte (appended), or -1
    floor_end: int = -1  # the end of the latest append let go (``trim``): data below it was there by
    floor_t_ns: int = 0  # this time (its forwarding)
    pending: list[int] = field(default_factory=list)  # produces with records sent, not yet answered: when
    pending_records: list[int] = field(default_factory=list)  # and how many records each carries
    confirmed: dict[int, int] = field(default_factory=dict)  # follower -> offset it has

    def trim(self, t_ns: int) -> int:
        """Let go of the appends older than ``APPEND_HORIZON_NS`` that every follower seen has
        confirmed, and of the oldest beyond ``MAX_APPENDS_PER_PARTITION`` (a quarter of it at once).
        The forwarding times ascend but for produces racing on two connections: a cut by time is
        right to within those. Returns how many went."""
        ends = self.append_ends
        cut = bisect.bisect_left(self.append_times, t_ns - APPEND_HORIZON_NS)
        if self.confirmed and cut:
            cut = min(cut, bisect.bisect_right(ends, min(self.confirmed.values())))
        over = len(ends) - MAX_APPENDS_PER_PARTITION
        if over > 0:
            cut = max(cut, over - 1 + MAX_APPENDS_PER_PARTITION // 4)
        if cut <= 0:
            return 0
        self.floor_end, self.floor_t_ns = ends[cut - 1], self.append_times[cut - 1]
        del ends[:cut]
        del self.append_times[:cut]
        del self.append_acks[:cut]
        return cut

    def arrival(self, fetch_offset: int, follower: bool, t_first_ns: int) -> int | None:
        """When the first data beyond ``fetch_offset`` could wake a fetch, by the appends seen
        (basis ``PRODUCE_SEEN``), or None: for a follower the append beginning, for a consumer the
        append acknowledged (``PartitionLogs.appended``). A follower's data may come from a produce
        not answered yet (acks=all is answered only after every follower's next fetch shows it
        has the records): the pending produces follow the last answered one in the log, in the
        order they were sent, each as long as its record count, so the one holding
        ``fetch_offset`` is the append that could wake the fetch. A consumer's fetch may be
        answered before the produce that woke it is (Kafka 4.x completes parked fetches as the
        high watermark moves, racing the produce's own answer; a share fetch alike): it is dated
        the same way, by the produce forwarded, not by the records' CreateTime (the producer's
        clock, taken before its batch was even sent)."""
        if fetch_offset < self.floor_end:  # the append that holds it was let go: it was there by then
            return self.floor_t_ns
        i = bisect.bisect_right(self.append_ends, fetch_offset)
        if i < len(self.append_ends):
            ack = self.append_acks[i]
            return self.append_times[i] if follower or ack < 0 else ack
        if self.pending and self.append_ends and fetch_offset >= self.append_ends[-1]:
            end = self.append_ends[-1]
            for t, n in zip(self.pending, self.pending_records, strict=True):
                end += n
                if fetch_offset < end:
                    if t <= t_first_ns:
                        return t
                    break
        return None

    def confirm(self, follower: int, offset: int, t_ns: int) -> list[int]:
        """A follower fetching from ``offset`` at ``t_ns`` holds every record below it: the
        latencies of the appends it confirms with this fetch (from each append's beginning)."""
        prev = self.confirmed.get(follower, -1)
        if offset <= prev:
            return []
        self.confirmed[follower] = offset
        lo = bisect.bisect_right(self.append_ends, prev) if prev >= 0 else 0
        hi = bisect.bisect_right(self.append_ends, offset)
        if prev < 0:  # the first fetch we see: earlier appends were confirmed before we looked
            lo = hi
        return [t_ns - self.append_times[i] for i in range(lo, hi)]


class PartitionLogs:
    """Every partition's ``PartitionLog``, by (topic, partition), and the appends they hold."""

    def __init__(self) -> None:
        self._parts: OrderedDict[tuple[str, int], PartitionLog] = OrderedDict()
        self.appends_held = 0  # appends every partition keeps (fetchlat_held_entries{structure="appends"})

    def __len__(self) -> int:
        return len(self._parts)

    def get(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, made where it is new (the oldest goes past ``MAX_PARTITIONS``)."""
        key = (topic, partition)
        p = self._parts.get(key)
        if p is None:
            if len(self._parts) >= MAX_PARTITIONS:
                self.appends_held -= len(self._parts.popitem(last=False)[1].append_ends)
            p = self._parts[key] = PartitionLog()
        return p

    def produced(self, topic: str, partition: int) -> bool:
        """A produce to the partition was seen (its data is dated by it), nothing made."""
        p = self._parts.get((topic, partition))
        return p is not None and (len(p.append_ends) > 0 or p.floor_end >= 0 or len(p.pending) > 0)

    def keep_topics(self, names: set[str]) -> int:
        """Only these topics' partitions are kept (the others were deleted): how many went."""
        gone = [key for key in self._parts if key[0] not in names]
        for key in gone:
            self.appends_held -= len(self._parts.pop(key).append_ends)
        return len(gone)

    def sent(self, topic: str, partition: int, t_ns: int, records: int) -> None:
        """A produce of ``records`` records to the partition went upstream at ``t_ns``, awaiting its answer."""
        st = self.get(topic, partition)
        st.pending.append(t_ns)
        st.pending_records.append(records)
        if len(st.pending) > MAX_PENDING_PER_PARTITION:
            del st.pending[0], st.pending_records[0]

    def answered(self, topic: str, partition: int, t_request_ns: int) -> None:
        """A produce forwarded at ``t_request_ns`` was answered: it and every produce to the
        partition sent before it are no longer pending."""
        st = self._parts.get((topic, partition))
        if st is not None and st.pending and st.pending[0] <= t_request_ns:
            keep = [i for i, t in enumerate(st.pending) if t > t_request_ns]
            st.pending = [st.pending[i] for i in keep]
            st.pending_records = [st.pending_records[i] for i in keep]

    def appended(self, topic: str, partition: int, end_offset: int, t_ns: int, ack_ns: int = -1) -> None:
        """The leader began appending up to ``end_offset`` at ``t_ns`` (the produce request
        forwarded: a sidecar forwards within microseconds of arrival) and had appended it by
        ``ack_ns`` (``LatencyModel._appended_by``: from the produce's answer; -1 for acks=0 or
        when not known). A follower's parked fetch wakes on the append; a consumer's when the high
        watermark covers it, which for acks=all (or one replica) is when the produce is
        acknowledged. Measured against Kafka's request log, the forwarded time came 2.5 ms early
        for a sidecar's consumers (the produce's own time in the broker)."""
        p = self.get(topic, partition)
        if p.append_ends and end_offset <= p.append_ends[-1]:
            return
        p.append_ends.append(end_offset)
        p.append_times.append(t_ns)
        p.append_acks.append(ack_ns)
        n = len(p.append_ends)
        self.appends_held += 1
        if n > MAX_APPENDS_PER_PARTITION or (n % TRIM_EVERY == 0 and p.append_times[0] < t_ns - APPEND_HORIZON_NS):
            self.appends_held -= p.trim(t_ns)
        if end_offset > p.log_end:
            p.log_end, p.log_end_t_ns = end_offset, t_ns

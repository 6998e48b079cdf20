"""TCP reassembly: one direction (``Stream``) and a whole conversation (``Flow``) give the same
bytes and the same exchanges however the capture cut, repeated or reordered the segments."""

from __future__ import annotations

import random

from fetchlat.capture.flows import COMPLETE, LOST, UNSYNCED, find_request_start
from fetchlat.capture.packets import ACK, FIN, SYN, Segment
from fetchlat.capture.reassembly import Stream, seq_diff
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.captures import conversations
from testkit.pcap_files import table

CLIENT = (b"\x7f\x00\x00\x01", 50000)
BROKER = (b"\x7f\x00\x00\x01", 9092)


def test_in_order_retransmitted_overlapping_and_late_segments() -> None:
    s = Stream()
    s.syn(99)
    assert s.add(100, b"abc") == [b"abc"]
    assert s.add(100, b"abc") == []  # a retransmission
    assert s.add(101, b"bcde") == [b"de"]  # an overlap: only the new bytes
    assert s.add(110, b"xyz") == []  # beyond a hole: waits
    assert s.has_hole
    assert s.add(105, b"fghij") == [b"fghij", b"xyz"]
    assert not s.has_hole and s.delivered == 13 and s.duplicate_bytes == 5


def test_sequence_numbers_wrap() -> None:
    s = Stream()
    s.syn(2**32 - 3)
    assert s.add(2**32 - 2, b"ab") == [b"ab"]
    assert s.add(0, b"cd") == [b"cd"]
    assert seq_diff(1, 2**32 - 1) == 2 and seq_diff(2**32 - 1, 1) == -2


def test_a_hole_that_never_fills_loses_the_stream() -> None:
    s = Stream(max_pending_bytes=10)
    s.syn(0)
    s.add(1, b"a")
    s.add(10, b"0123456789")
    assert not s.lost
    s.add(20, b"x")
    assert s.lost and s.add(2, b"b") == []


@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=1, max_size=400), rnd=st.randoms(use_true_random=False), isn=st.integers(0, 2**32 - 1))
def test_any_cutting_repeating_and_reordering_gives_the_bytes_back(data: bytes, rnd: random.Random, isn: int) -> None:
    pieces = []
    pos = 0
    while pos < len(data):
        start = max(0, pos - rnd.randint(0, 3))  # may overlap what came before
        end = min(len(data), pos + rnd.randint(1, 40))
        pieces.append((start, data[start:end]))
        pos = end
    pieces += rnd.sample(pieces, k=min(len(pieces), rnd.randint(0, 3)))  # duplicates
    order = sorted(range(len(pieces)), key=lambda i: i + rnd.randint(0, 4))  # a bounded reordering
    s = Stream()
    s.syn(isn)
    out = b"".join(c for i in order for c in s.add((isn + 1 + pieces[i][0]) % 2**32, pieces[i][1]))
    assert out == data and not s.has_hole


# ---------------------------------------------------------------- whole conversations
def conversation(run: str = "confluent", conn: int = 2) -> list[tuple[bool, bytes]]:
    """A real client's conversation: (to_broker, frame on the wire), in the order they went."""
    return [(f.direction == "req", f.wire) for f in conversations(run)[conn]]


def segments(msgs: list[tuple[bool, bytes]], rnd: random.Random, *, syn: bool = True, skip: int = 0
             ) -> list[tuple[Segment, int]]:
    """Segments of both directions with timestamps (µs apart), cut at random, some repeated,
    each direction reordered a little. ``skip``: messages sent before the capture began."""
    seq = {True: 1000, False: 7000}
    out: list[tuple[Segment, int]] = []
    t = 1_000_000_000
    if syn:
        out.append((Segment(CLIENT, BROKER, seq[True] - 1, SYN, memoryview(b"")), t))
        out.append((Segment(BROKER, CLIENT, seq[False] - 1, SYN | ACK, memoryview(b"")), t))
    for i, (to_broker, wire) in enumerate(msgs):
        t += 1_000_000
        src, dst = (CLIENT, BROKER) if to_broker else (BROKER, CLIENT)
        pos = 0
        mine: list[tuple[Segment, int]] = []
        while pos < len(wire):
            end = min(len(wire), pos + rnd.randint(1, max(1, len(wire) // 2)))
            mine.append((Segment(src, dst, seq[to_broker] + pos, ACK, memoryview(wire[pos:end])), t))
            pos = end
        seq[to_broker] += len(wire)
        if i < skip:
            continue
        mine += rnd.sample(mine, k=min(len(mine), rnd.randint(0, 2)))
        rnd.shuffle(mine)  # within one message: the capture saw them in another order
        out += sorted(mine, key=lambda p: p[1])
    t += 1_000_000
    out.append((Segment(CLIENT, BROKER, seq[True], FIN | ACK, memoryview(b"")), t))
    out.append((Segment(BROKER, CLIENT, seq[False], FIN | ACK, memoryview(b"")), t))
    return out


IDENTITY = ("conn_id", "correlation_id", "api", "api_version", "request_bytes", "response_bytes", "records",
            "error_code", "partitions")


def exchanges(segs: list[tuple[Segment, int]]) -> tuple[list[tuple[object, ...]], object]:
    ended: list[object] = []
    flows, rows = table({BROKER[1]}, on_end=lambda f: ended.append(f.ended))
    for seg, t in segs:
        flows.segment(seg, t)
    flows.close_all()
    return [tuple(r.get(k) for k in IDENTITY) for r in rows.exchanges()], ended


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large])
@given(rnd=st.randoms(use_true_random=False), run=st.sampled_from(["confluent", "aiokafka", "kafkapython"]))
def test_a_conversation_cut_repeated_or_reordered_gives_the_same_exchanges(rnd: random.Random, run: str) -> None:
    msgs = conversation(run, 2)
    whole = exchanges(segments(msgs, random.Random(0)))
    assert whole[0] and whole[1] == [COMPLETE]
    assert exchanges(segments(msgs, rnd)) == whole


def test_a_conversation_begun_before_the_capture_resynchronises_on_the_next_whole_frame() -> None:
    msgs = conversation("confluent", 2)
    full, _ = exchanges(segments(msgs, random.Random(1)))
    for skip in (1, 2, 3, 5):
        got, ended = exchanges(segments(msgs, random.Random(1), syn=False, skip=skip))
        answered_later = full[-len(got):] if got else []
        assert got == answered_later and len(got) >= len(full) - skip // 2 - 2, skip
        assert ended == [COMPLETE]


def test_a_lost_segment_stops_that_conversation_with_a_count_never_a_wrong_figure() -> None:
    msgs = conversation("confluent", 2)
    segs = segments(msgs, random.Random(2))
    full, _ = exchanges(segs)
    data = [i for i, (s, _) in enumerate(segs) if len(s.payload) and s.src == CLIENT]
    cut = data[len(data) // 2]
    got, ended = exchanges(segs[:cut] + segs[cut + 1 :])
    assert ended == [LOST]
    assert got == full[: len(got)] and len(got) < len(full)


def test_bytes_that_never_make_a_frame_are_counted_not_measured() -> None:
    rnd = random.Random(3)
    noise = bytes(rnd.randrange(256) for _ in range(3000))
    assert find_request_start(bytearray(noise), 100 << 20) == -1
    got, ended = exchanges([(Segment(CLIENT, BROKER, 5, ACK, memoryview(noise)), 1)])
    assert got == [] and ended == [UNSYNCED]

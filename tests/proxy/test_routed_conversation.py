"""A connection read by the native core first (``protocol/routed.py``) against the same connection
read by the Python road alone, through the whole proxy core (``Conversation``, the observer, the
model, the trace columns): every captured conversation, whole, pipelined and cut at every byte,
must give the same bytes both ways, the same actions (log lines, closes), the same value of every
metric sample, the same trace rows and the same round trips learned by the model."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fetchlat import native
from fetchlat.protocol.framing import request_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.captures import RUNS, Frame, conversations
from testkit.playbook import MS, T0, Playbook
from testkit.wire_roads import Chunk, cut_frames, pipelined

pytestmark = pytest.mark.skipif(native.core() is None, reason=f"native core not loaded: {native.reason()}")

HEARTBEAT = 12


def _play(chunks: list[Chunk], routed: bool) -> dict[str, Any]:
    pb = Playbook(routed=routed)
    assert (pb.conv.routed is not None) == routed
    actions: list[Any] = list(pb.connect_upstream(T0))
    for i, (from_client, data) in enumerate(chunks):
        t = T0 + (i + 1) * MS
        actions += pb.client(data, t) if from_client else pb.broker(data, t, t + 20_000)
    samples = sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                     for metric in pb.prom.collect() for s in metric.samples)
    return {"client": b"".join(pb.client_writes), "upstream": b"".join(pb.upstream_writes), "actions": actions,
            "samples": samples, "rows": pb.rows, "in_flight": pb.conv.in_flight,
            # what the model learned of the network from answers that do not wait (ListOffsets...)
            "round_trips": list(pb.observer.model.round_trips._recent)}


def _same(chunks: list[Chunk]) -> None:
    python, routed = _play(chunks, False), _play(chunks, True)
    for key in python:
        assert routed[key] == python[key], key


CONVERSATIONS = [(run, conn, frames) for run in RUNS for conn, frames in conversations(run).items()]


@pytest.mark.parametrize(("run", "conn", "frames"), CONVERSATIONS, ids=[f"{r}-{c}" for r, c, _ in CONVERSATIONS])
def test_captured_conversations_observe_alike_on_both_roads(run: str, conn: int, frames: list[Frame]) -> None:
    _same([(f.direction == "req", f.wire) for f in frames])
    _same(list(pipelined(frames)))
    for at in (1, 3, 7, 8, 9, 13, 40, 300):
        _same(list(cut_frames(frames, at)))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_pipelined_conversations_cut_anywhere_observe_alike(data: st.DataObject) -> None:
    """Each side's frames run together and cut where hypothesis says: reads that end inside an
    answer's size prefix, hold pieces of several frames, or split a routed request's first bytes."""
    _, _, frames = data.draw(st.sampled_from(CONVERSATIONS))
    chunks: list[Chunk] = []
    for from_client, run in pipelined(frames):
        cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(run) - 1)), max_size=8))))
        edges = [0, *[c for c in cuts if c < len(run)], len(run)]
        chunks += [(from_client, run[a:b]) for a, b in itertools.pairwise(edges) if b > a]
    _same(chunks)


def test_the_rows_of_both_roads_are_there() -> None:
    """The comparison above compares something: the conversations make rows of every table, of
    fetches and produces (the Python road's) and of answers the core settles alone."""
    tables: set[str] = set()
    apis_seen: set[str] = set()
    for _, _, frames in CONVERSATIONS:
        got = _play([(f.direction == "req", f.wire) for f in frames], True)
        tables |= {table for table, _ in got["rows"]}
        apis_seen |= {row["api"] for table, row in got["rows"] if table == "exchanges"}
    assert tables == {"exchanges", "partitions"}
    assert {"Fetch", "Produce", "Heartbeat", "OffsetCommit", "ListOffsets"} <= apis_seen, apis_seen


def test_an_unreadable_header_is_logged_and_counted_alike() -> None:
    """A request whose client id runs past the peek window: the core settles it alone (a
    heartbeat), and says what the Python road says of it."""
    hb = request_frame(HEARTBEAT, 4, 9, "x" * 600, b"\x00" * 8)
    _same([(True, hb), (False, (8).to_bytes(4, "big") + (9).to_bytes(4, "big") + b"\x00\x00\x00\x00")])
    got = _play([(True, hb)], True)
    assert any("not decoded" in getattr(a, "message", "") for a in got["actions"])

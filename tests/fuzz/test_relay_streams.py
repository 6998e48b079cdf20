"""The core's relay driven with hostile streams from both sides, in any cuts (hypothesis, a
bounded number of examples a run; ``make fuzz`` runs the coverage-guided fuzzer, whose target
drives the relay too): real frames of four clients with bytes flipped, cut short or run together,
and plain garbage, written by the test's client and broker ends over loopback. The relay must do
what the Python road does with the same bytes: hand every byte on in order, or end the pair in the
Python road's words where it loses its framing (``testkit/wire_roads.py``, ``relay_disagreement``)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.captures import RUNS, conversations
from testkit.wire_roads import CORE, Chunk, relay_disagreement

pytestmark = pytest.mark.skipif(CORE is None, reason="native core not loaded")

FRAMES = [(f.direction == "req", f.wire)
          for run in RUNS for frames in conversations(run).values() for f in frames][:400]


@st.composite
def streams(draw: st.DrawFn) -> list[Chunk]:
    out: list[Chunk] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["frame", "flipped", "cut", "garbage"]))
        if kind == "garbage":
            out.append((draw(st.booleans()), draw(st.binary(min_size=1, max_size=300))))
            continue
        is_request, wire = draw(st.sampled_from(FRAMES))
        if kind == "flipped":
            b = bytearray(wire)
            for _ in range(draw(st.integers(1, 4))):
                b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
            wire = bytes(b)
        elif kind == "cut":
            wire = wire[:draw(st.integers(1, len(wire)))]
        out.append((is_request, wire))
    step = draw(st.sampled_from([1, 3, 7, 64, 1 << 20]))
    return [(d, data[i:i + step]) for d, data in out for i in range(0, len(data), step)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams())
def test_the_relay_does_what_the_python_road_does_with_any_stream(chunks: list[Chunk]) -> None:
    assert relay_disagreement(chunks) is None

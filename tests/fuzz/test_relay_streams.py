"""The core's relay driven with hostile streams from both sides, in any cuts (hypothesis, a
bounded number of examples a run; ``make fuzz`` runs the coverage-guided fuzzer, whose target
drives the relay too): real frames of four clients with bytes flipped, cut short or run together,
and plain garbage, written by the test's client and broker ends over loopback. The relay must do
what the Python road does with the same bytes: hand every byte on in order, or end the pair in the
Python road's words where it loses its framing (``testkit/wire_roads.py``, ``relay_disagreement``).
The same holds where the client speaks TLS to the core (a TLS sidecar's road, ``relay/front.rs``):
its plaintext, decrypted by the core, is held to the Python road the same way."""

from __future__ import annotations

import functools
import ssl
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.captures import RUNS, conversations
from testkit.certs import make_certs
from testkit.wire_roads import CORE, Chunk, TlsClient, relay_disagreement

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


@functools.cache
def tls_client() -> TlsClient:
    """The relay's certificate (made once a run) and a client context trusting it."""
    certs = make_certs(Path(tempfile.mkdtemp(prefix="fetchlat-fuzz-certs-")))
    return TlsClient(certs.server.cert, certs.server.key, ssl.create_default_context(cafile=str(certs.ca)))


@pytest.mark.skipif(CORE is None or not hasattr(CORE.Relay, "front"), reason="native core without TLS")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams())
def test_a_tls_client_relayed_by_the_core_is_framed_as_the_python_road_frames_its_plaintext(
        chunks: list[Chunk]) -> None:
    assert relay_disagreement(chunks, tls_client()) is None

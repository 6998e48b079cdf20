"""One client<->broker connection, both directions, as a sans-I/O state machine: a
``RequestDecoder`` (client -> broker) and a ``ResponseDecoder`` (broker -> client) over the
state they share (``inflight.Shared``: requests awaiting a response, fetch sessions, raw SASL).

Requests are forwarded by the caller *before* they are observed here (same bytes object).
Responses come back as the segments to forward: a streamed response chunk by chunk as the
very objects received (or memoryview slices where a chunk holds a frame boundary); a response
a rewriter wants is held whole, then forwarded untouched or rewritten (``responses.py`` has
the table of modes). Must never: do I/O, read clocks, or copy a payload it does not rewrite.
"""

from __future__ import annotations

from collections import deque

from .events import Event
from .framing import DEFAULT_MAX_FRAME_BYTES, Segment
from .inflight import InFlight, Shared
from .requests import RequestDecoder
from .responses import STREAM_TAIL_BYTES, ResponseDecoder
from .rewrite import ResponseRewriter
from .sessions import FetchSessions

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "STREAM_TAIL_BYTES", "KafkaConnection", "Segment"]


class KafkaConnection:
    """Decodes one client<->broker connection. Never does I/O.

    A proxy calls ``receive_from_client`` after forwarding a request chunk, and for a response
    chunk ``forward_from_broker`` (segments to write, events to act on before writing them),
    then ``after_write()`` once they are written. A caller that only observes (a packet
    capture, a test) calls ``receive_from_broker``, which does both at once.
    """

    def __init__(
        self,
        *,
        rewriter: ResponseRewriter | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        wait_time_tag: int | None = None,
        sessions: FetchSessions | None = None,
    ) -> None:
        """``sessions``: the fetch-session mirror of the broker this connection reaches, shared
        with its other connections (a session outlives a connection); its own one without."""
        self.shared = Shared() if sessions is None else Shared(sessions=sessions)
        self.requests = RequestDecoder(self.shared, max_frame_bytes)
        self.responses = ResponseDecoder(self.shared, max_frame_bytes, rewriter, wait_time_tag)

    @property
    def in_flight(self) -> deque[InFlight]:
        return self.shared.in_flight

    @property
    def client_mid_frame(self) -> bool:
        """A request has begun arriving and has not finished."""
        return self.requests.mid_frame

    def receive_from_client(self, data: bytes, t_ns: int) -> list[Event]:
        return self.requests.receive(data, t_ns)

    def digested_from_client(self, head: bytes, skeleton: bytes, stats: bytes, t_ns: int) -> list[Event]:
        """A Produce request read by the native core, ended at ``t_ns``: its first bytes and its
        body's digest (``digested.py``); its events."""
        return self.requests.digested(head, skeleton, stats, t_ns)

    def forward_from_broker(self, data: bytes, t_ns: int) -> tuple[list[Segment], list[Event]]:
        """The segments to write to the client and the events to act on *before* writing them."""
        return self.responses.forward(data, t_ns)

    def after_write(self) -> list[Event]:
        """Every other event of the chunks forwarded so far (their parse runs now)."""
        return self.responses.after_write()

    def receive_from_broker(self, data: bytes, t_ns: int) -> tuple[list[Segment], list[Event]]:
        """For callers that only observe: the segments, and all the events at once."""
        out, before = self.responses.forward(data, t_ns)
        return out, before + self.responses.after_write()

    def digested_from_broker(self, skeleton: bytes, stats: bytes, t_ns: int) -> list[Event]:
        """The body of the Fetch answer under way, ended at ``t_ns``, as the native core's digest
        of it (``digested.py``): the answer's events."""
        return self.responses.digested(skeleton, stats, t_ns)

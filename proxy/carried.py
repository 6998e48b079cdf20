"""A conversation the native core carries (``relayed.py``), sans-I/O: what the core's reports of
one connection mean. Its reads (the bytes the Python road parses, the records of the exchanges
the core settled alone, the digest of a Fetch answer or a Produce request), the answers it held
whole for the rewriter (rewritten here, as on the event loop's road), its byte counts and
timers, and its end in the core's words, each turned into the conversation's events, samples,
counters, policy verdicts and closes, as the event loop's road turns its own reads.

``session.py``'s ``CarriedSide`` carries out what it returns; ``Conversation.can_hand_over``
says when a connection may be handed over, and ``handed_over`` readies its codec.

Must never: read clocks, touch sockets or asyncio.
"""

from __future__ import annotations

from ..protocol.errors import FramingError
from ..protocol.events import Event
from ..protocol.held import rewritten
from ..protocol.routed import HANDED, Records
from .conversation import Action, Close, Conversation
from .policy import Refusal, core_tls_failure


class CarriedConversation:
    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self._in = 0  # the core's byte counts already counted (counts)
        self._out = 0

    def read(self, from_broker: bool, data: bytes, t_ns: int, t_written_ns: int, records: Records | None,
             client_bytes: int, broker_bytes: int, handed: bytes | None = None,
             digest: tuple[bytes, bytes, bytes] | None = None) -> tuple[Action, ...]:
        """A read the core carried: the bytes of it the Python road parses (b"" for none) and the
        core's records of the exchanges it settled alone, read at ``t_ns`` and written on at
        ``t_written_ns``; ``client_bytes``, ``broker_bytes``: the bytes read from each side so far;
        ``handed``: the ``(read, written)`` stamps of the earlier reads whose bytes it gathers
        (``routed.HANDED`` pairs), or None; ``digest``: ``(head, skeleton, stats)``, the core's
        digest of the Fetch answer under way (``head`` b"") or of the Produce request (its first
        bytes) that ended in this read, before its bytes (``protocol/digested.py``), or None."""
        self.counts(client_bytes, broker_bytes)
        conv = self.conv
        codec = conv.codec
        events: list[Event]
        try:
            if from_broker:
                if handed is not None:
                    for t_read, t_wrote in HANDED.iter_unpack(handed):
                        conv.observer.handed_on(t_read, t_wrote)
                conv.observer.handed_on(t_ns, t_written_ns)
                events = codec.digested_from_broker(digest[1], digest[2], t_ns) if digest is not None else []
                if data:
                    events += codec.receive_from_broker(data, t_ns)[1]
            else:
                events = codec.digested_from_client(*digest, t_ns) if digest is not None else []
                if data:
                    events += codec.receive_from_client(data, t_ns)
                t_written_ns = t_ns
        except FramingError as exc:  # the core framed these bytes: a disagreement, not the peer's
            return (conv.framing_lost("response" if from_broker else "request", exc),)
        return conv.observe_read(records, events, t_ns, t_written_ns)

    def answer(self, frame: bytes, api: tuple[int, int], t_ns: int) -> tuple[bytes, bool, bool, tuple[Action, ...]]:
        """An answer the core held whole (``frame``, size prefix included, read whole at ``t_ns``)
        to a request of ``api`` (key, version): the frame the core writes in its place (rewritten,
        or the very frame where the rewriter changes nothing or cannot read it), whether it was
        rewritten, whether it was read, and what must happen before it is written (the brokers
        it names, learned). The same for one the core repeated itself (its frame not used)."""
        conv = self.conv
        rewriter = conv.ctx.rewriter
        if rewriter is None:
            return frame, False, False, ()
        before: list[Event] = []
        events: list[Event] = []
        new = rewritten(rewriter, api[0], api[1], memoryview(frame)[4:], before, events)
        actions = conv.taught(before, t_ns) if before else ()
        if events:
            conv.observer.observe(events, t_ns, t_ns)  # a decode failure, counted as on the event loop
        if new is None:
            return frame, False, not events, actions
        return len(new).to_bytes(4, "big") + new, True, True, actions

    def counts(self, c: int, b: int) -> None:
        """The bytes the core read from the client (``c``) and from the broker (``b``) so far, into the counters."""
        if c > self._in:
            self.conv.bytes_in.inc(c - self._in)
            self._in = c
        if b > self._out:
            self.conv.bytes_out.inc(b - self._out)
            self._out = b

    def timers(self, now_ns: int, counts: tuple[int, int], client_read_ns: int, partial_since_ns: int,
               stalled_since_ns: int, rtt_ns: int) -> None:
        """The core's timers of the connection, for the policy (``Conversation.expire`` decides as ever)."""
        self.counts(*counts)
        conv = self.conv
        policy = conv.policy
        policy.last_active_ns = max(policy.last_active_ns, client_read_ns)
        policy.partial_since_ns = partial_since_ns
        policy.stalled_since_ns = stalled_since_ns
        if rtt_ns and conv.rtt_due(now_ns):
            conv.client_rtt(rtt_ns, now_ns)

    def ended(self, reason: str, counts: tuple[int, int]) -> tuple[bool, Close | None]:
        """The core ended the connection for ``reason``: whether the broker went first, and the
        close to log where a frame was refused."""
        self.counts(*counts)
        conv = self.conv
        for side in ("request", "response"):
            if reason.startswith(side + " "):
                return False, conv.framing_lost(side, FramingError(reason))
        tls = core_tls_failure(reason)
        if tls is not None:
            return False, conv.refuse(tls)
        if reason.startswith("relay buffers"):
            return False, conv.refuse(Refusal("relay_buffers", f"{reason}; closing this connection only"))
        if reason.endswith("after the client's end of stream"):
            return False, None  # expected: the client half-closed first
        return reason.startswith(("broker", "write to the broker")), None

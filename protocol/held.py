"""A response held whole (``responses.py``'s HOLD mode): rewritten where a rewriter wants it
(what it taught the proxy, brokers and topic ids, returned to be acted on before the write), and an
answer to a SaslHandshake v0 read for the mechanism's outcome (the raw SASL rounds that follow
are framed by count, or the connection is passed through unobserved).

Must never: do I/O, read clocks, or change a response it does not rewrite.
"""

from __future__ import annotations

from .errors import DecodeError, ProtocolError
from .events import BrokersLearned, DecodeFailed, Event, SaslPassthroughStarted, TopicIdsLearned
from .framing import Segment
from .inflight import SASL_ROUNDS, InFlight, Shared
from .primitives import I16, read_fixed
from .rewrite import ResponseRewriter


def held(rewriter: ResponseRewriter | None, shared: Shared, cur: InFlight, frame: bytes, pieces: list[Segment],
         rewrite: bool, out: list[Segment], before: list[Event], events: list[Event]) -> bool:
    """A held response to ``cur``, whole in ``frame`` (its size prefix first; ``pieces``: as it
    came): rewritten when ``rewrite`` (what it taught, in ``before``), read for the SASL mechanism's
    outcome when it answers a SaslHandshake v0; its bytes to write in ``out``. True when
    rewritten."""
    body = memoryview(frame)[4:]
    new = None
    if rewriter is not None and rewrite:
        new = rewritten(rewriter, cur.api_key, cur.api_version, body, before, events)
    if cur.sasl_mechanism is not None:
        after_sasl_handshake_v0(shared, cur.sasl_mechanism, body, events)
    if new is not None:
        out.append(len(new).to_bytes(4, "big") + new)
        return True
    out.extend(pieces)
    return False


def rewritten(rewriter: ResponseRewriter, api_key: int, api_version: int, body: memoryview, before: list[Event],
              events: list[Event]) -> bytes | None:
    """``body`` (an answer held whole, after its size prefix) rewritten: its new body, or None
    where nothing changes or it cannot be read (a ``DecodeFailed`` in ``events``: it goes on as
    it came); what it taught (brokers, topic ids and leaders) in ``before``, to act on before the
    answer is written. The event loop's road (``held``) and the core's (``proxy/carried.py``)
    both rewrite through it."""
    try:
        result = rewriter.rewrite(api_key, api_version, body)
    except ProtocolError as exc:
        events.append(DecodeFailed(api_key=api_key, api_version=api_version, direction="response", reason=str(exc)))
        return None
    if result.learned:
        before.append(BrokersLearned(api_key=api_key, brokers=tuple(result.learned)))
    if result.topic_ids or result.leaders:
        before.append(TopicIdsLearned(topics=tuple(result.topic_ids), leaders=tuple(result.leaders)))
    return result.body


def after_sasl_handshake_v0(shared: Shared, mechanism: str, body: memoryview, events: list[Event]) -> None:
    """An answer to a SaslHandshake v0: on success, the raw rounds of ``mechanism`` to frame by
    count (``SASL_ROUNDS``), or, for a mechanism of unknown rounds, passthrough from here on."""
    try:
        code, _ = read_fixed(I16, body, 4)
    except DecodeError:
        return
    if code != 0:
        return
    rounds = SASL_ROUNDS.get(mechanism.upper())
    if rounds is None:
        shared.passthrough = True
        events.append(SaslPassthroughStarted(mechanism=mechanism))
    else:
        shared.sasl_raw_rounds = rounds

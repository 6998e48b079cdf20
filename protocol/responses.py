"""Broker -> client: the response stream of one connection, as segments to forward and events.

Owns: response framing and correlation (the oldest request in flight must match), and how
each response is handled, which ``response_mode`` decides from one table:

- PASS: not Fetch/ShareFetch/Produce, nothing to rewrite. Forwarded as received, never parsed.
- DEFER: Fetch/ShareFetch/Produce, nothing to rewrite (or a ShareFetch larger than
  HOLD_LIMIT_BYTES: its NodeEndpoints array stays as the broker wrote it). Forwarded as
  received, parsed after the write.
- HOLD: a rewriter wants it, or it answers a SaslHandshake v0. Held whole, parsed, then
  forwarded as it came or rewritten.
- STREAM_HELD_TAIL: HOLD, but a Fetch larger than HOLD_LIMIT_BYTES. Streamed and parsed as it
  streams; its last STREAM_TAIL_BYTES wait until the top-level tags (NodeEndpoints) are read.

``forward(data, t)`` returns the segments to write and the events the caller must act on
*before* writing them (brokers and topic ids learned: a client must never see an address
nobody listens on); ``after_write()`` returns every other event, running the parses deferred
until the bytes were on their way. Must never: do I/O, read clocks, or copy a payload it
does not rewrite.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

from . import apis, digested, fetch, fetch_now, produce, produce_now, share, share_now
from .errors import FramingError
from .events import (
    DecodeFailed,
    Event,
    FetchExchanged,
    ProduceExchanged,
    ResponseSeen,
)
from .framing import Segment, be_i32, frame_size
from .held import held
from .inflight import SASL_TOKEN, InFlight, Shared
from .rewrite import ResponseRewriter
from .stream import Feeder, Twin, run_direct

# A response a rewriter wants is held whole, except a Fetch v16+ response larger than this: it
# streams, and only its last STREAM_TAIL_BYTES wait until the top-level tags have been read.
HOLD_LIMIT_BYTES: Final = 1 << 20
STREAM_TAIL_BYTES: Final = 4 << 10  # any held-back byte would do: a client acts only on a whole frame


class ResponseMode(enum.Enum):
    PASS = "pass"
    DEFER = "defer"
    HOLD = "hold"
    STREAM_HELD_TAIL = "stream_held_tail"


def response_mode(*, api_key: int, size: int, decoded: bool, rewrite: bool, sasl_handshake: bool) -> ResponseMode:
    """How a response of ``size`` bytes is handled (the table in the module docstring).
    ``decoded``: its request was parsed (Fetch/Produce); ``rewrite``: a rewriter wants this
    api key and version; ``sasl_handshake``: it answers a SaslHandshake v0."""
    if sasl_handshake or rewrite:
        if api_key == apis.SHARE_FETCH and size > HOLD_LIMIT_BYTES:
            # forwarded as it comes, its NodeEndpoints array unrewritten: a broker names brokers
            # there beside partitions that failed (a leader moved, no records), rare in a
            # response this big
            return ResponseMode.DEFER if decoded else ResponseMode.PASS
        if api_key == apis.FETCH and size > HOLD_LIMIT_BYTES and decoded:
            # a broker lists NodeEndpoints only beside partitions that failed (no records): a big
            # response streams, holding back its last bytes (where the tag lives)
            return ResponseMode.STREAM_HELD_TAIL
        return ResponseMode.HOLD
    return ResponseMode.DEFER if decoded else ResponseMode.PASS


def _covers(out: list[Segment], data: bytes) -> bool:
    """``out`` is ``data`` whole, as its own slices in order (they never overlap)."""
    total = 0
    for piece in out:
        if not isinstance(piece, memoryview) or piece.obj is not data:
            return False
        total += len(piece)
    return total == len(data)


@dataclass(slots=True)
class _Finish:
    """A response that ended; its parse (if any) runs in ``after_write``: fed in pieces to
    ``feeder``, or, when it arrived whole, ``body`` (after the correlation id) for the twin."""

    cur: InFlight
    feeder: Feeder | None
    size: int
    t_first: int
    t_last: int
    body: memoryview | None

    def __init__(self, cur: InFlight, feeder: Feeder | None, size: int, t_first: int, t_last: int,
                 body: memoryview | None = None) -> None:
        self.cur = cur
        self.feeder = feeder
        self.size = size
        self.t_first = t_first
        self.t_last = t_last
        self.body = body


def _check_correlation(corr: int, head: InFlight) -> None:
    if corr != head.correlation_id:
        raise FramingError(f"response correlation id {corr} does not match the oldest request's {head.correlation_id}")


_TWINS: Final[dict[tuple[int, int, int | None], Twin]] = {}


def _twin(api_key: int, v: int, wait_time_tag: int | None) -> Twin:
    if api_key == apis.FETCH:
        return Twin(lambda: fetch.parse_response(v, wait_time_tag, after_correlation_id=True),
                    lambda b: fetch_now.parse_response_now(b, v, wait_time_tag, after_correlation_id=True))
    if api_key == apis.SHARE_FETCH:
        return Twin(lambda: share.parse_response(v, after_correlation_id=True),
                    lambda b: share_now.parse_response_now(b, v, after_correlation_id=True))
    return Twin(lambda: produce.parse_response(v, after_correlation_id=True),
                lambda b: produce_now.parse_response_now(b, v, after_correlation_id=True))


def _response_twin(head: InFlight, wait_time_tag: int | None) -> Twin:
    key = (head.api_key, head.api_version, wait_time_tag)
    twin = _TWINS.get(key)
    if twin is None:
        twin = _TWINS[key] = _twin(head.api_key, head.api_version, wait_time_tag)
    return twin


def _seen(cur: InFlight, size: int, t_first: int, t_last: int, *, rewritten: bool) -> ResponseSeen:
    return ResponseSeen(correlation_id=cur.correlation_id, api_key=cur.api_key, api_version=cur.api_version,
                        client_id=cur.client_id, size_bytes=size, t_request_ns=cur.t_request_ns,
                        t_first_ns=t_first, t_last_ns=t_last, rewritten=rewritten)


def _exchange_complete(shared: Shared, cur: InFlight, info: Any,
                       error: str | None, size: int, t_first: int, t_ns: int, events: list[Event]) -> None:
    """The event a whole fetch or produce exchange yields (its fetch session mirrored first), or
    what kept its response from decoding."""
    if info is None:
        events.append(DecodeFailed(api_key=cur.api_key, api_version=cur.api_version, direction="response",
                                   reason=error or "undecodable"))
        return
    if isinstance(cur.info, fetch.FetchRequestInfo):
        shared.sessions.on_response(cur.info, info, cur.covered)
        events.append(FetchExchanged(
            correlation_id=cur.correlation_id, client_id=cur.client_id, api_version=cur.api_version,
            request=cur.info, response=info, covered=cur.covered, t_request_ns=cur.t_request_ns,
            t_first_ns=t_first, t_last_ns=t_ns, request_bytes=cur.request_bytes, response_bytes=size + 4))
    elif isinstance(cur.info, produce.ProduceRequestInfo):
        events.append(ProduceExchanged(
            correlation_id=cur.correlation_id, client_id=cur.client_id, api_version=cur.api_version,
            request=cur.info, response=info, t_request_ns=cur.t_request_ns, t_first_ns=t_first,
            t_last_ns=t_ns, request_bytes=cur.request_bytes, response_bytes=size + 4))


class ResponseDecoder:
    """Frames, correlates, forwards and (after the write) decodes responses. Never does I/O."""

    def __init__(self, shared: Shared, max_frame_bytes: int, rewriter: ResponseRewriter | None,
                 wait_time_tag: int | None) -> None:
        self.shared = shared
        self.max_frame_bytes = max_frame_bytes
        self.rewriter = rewriter
        self.wait_time_tag = wait_time_tag
        # what after_write() runs, in order: chunks to feed, responses that ended, ready events
        self._after: list[tuple[Feeder, Segment] | _Finish | Event] = []
        self._prefix = bytearray()
        self._prefix_pieces: list[Segment] = []
        self._left = 0
        self._size = 0
        self._mode = ResponseMode.PASS
        self._hold: list[Segment] = []
        self._tail: list[Segment] = []
        self._current: InFlight | None = None
        self._t_first = 0
        self._feeder: Feeder | None = None

    @property
    def mid_frame(self) -> bool:
        """An answer has begun arriving and has not finished."""
        return self._current is not None or bool(self._prefix)

    def forward(self, data: bytes, t_ns: int) -> tuple[list[Segment], list[Event]]:
        """The segments to write to the client, and the events to act on before writing them."""
        if self.shared.passthrough:
            return [data], []
        out: list[Segment] = []
        before: list[Event] = []
        view: memoryview | None = None
        pos, n = 0, len(data)
        while pos < n:
            if (self._current is None and not self._prefix and n - pos >= 8
                    and self._whole(data, pos, t_ns, out, before)):
                pos += 4 + self._size
                continue
            if self._current is None:
                # collect the 4-byte size and (for Kafka frames) the 4-byte correlation id
                in_flight = self.shared.in_flight
                if not in_flight:  # an answer's first byte with nothing asked: refused at once
                    raise FramingError("response from the broker matches no request")
                want = 8 if not (in_flight and in_flight[0].api_key == SASL_TOKEN) else 4
                take = min(want - len(self._prefix), n - pos)
                if view is None:
                    view = memoryview(data)
                self._prefix += view[pos : pos + take]
                self._prefix_pieces.append(data if (pos == 0 and take == n) else view[pos : pos + take])
                pos += take
                if len(self._prefix) == want:
                    self._start(t_ns, out)
                    if self._left == 0:
                        self._finish(t_ns, out, before)
                continue
            take = min(self._left, n - pos)
            if pos == 0 and take == n:
                piece: Segment = data  # the common case: forward the very object received
            else:
                if view is None:
                    view = memoryview(data)
                piece = view[pos : pos + take]
            mode = self._mode
            if mode is ResponseMode.HOLD:
                self._hold.append(piece)
            elif mode is ResponseMode.STREAM_HELD_TAIL and self._left - take < STREAM_TAIL_BYTES:
                cut = max(0, self._left - STREAM_TAIL_BYTES)  # bytes of this piece before the tail
                if cut:
                    out.append(piece[:cut])
                self._tail.append(piece[cut:] if cut else piece)
            else:
                out.append(piece)
            if self._feeder is not None:
                if mode is ResponseMode.DEFER:
                    self._after.append((self._feeder, piece))
                else:
                    self._feeder.feed(piece)
            pos += take
            self._left -= take
            if self._left == 0:
                self._finish(t_ns, out, before)
        if len(out) > 1 and view is not None and _covers(out, data):
            out = [data]  # frames cut apart only by the parse: one object, one write
        return out, before

    def _whole(self, data: bytes, pos: int, t_ns: int, out: list[Segment], before: list[Event]) -> bool:
        """The common case: a response that lies whole in ``data`` from ``pos``. Handled where it
        lies: forwarded as it came (PASS or DEFER: its slice, or ``data`` itself, to write, and for
        DEFER its body for the direct twin after the write), or rewritten (HOLD, when nothing of
        its body is parsed: Metadata, ApiVersions, FindCoordinator...). False (nothing changed)
        when it is anything else; the general road below takes it then."""
        in_flight = self.shared.in_flight
        if not in_flight or in_flight[0].api_key == SASL_TOKEN:
            return False
        size = frame_size(data, self.max_frame_bytes, "response", pos)
        end = pos + 4 + size
        if size < 4 or end > len(data):
            return False
        head = in_flight[0]
        mode = self._mode_of(head, size)
        rewritten_here = mode is ResponseMode.HOLD and head.info is None and head.sasl_mechanism is None
        if mode is not ResponseMode.PASS and mode is not ResponseMode.DEFER and not rewritten_here:
            return False
        _check_correlation(be_i32(data, pos + 4), head)
        in_flight.popleft()
        self._size = size
        whole = pos == 0 and end == len(data)
        view = None if whole else memoryview(data)
        piece: Segment = data if view is None else view[pos:end]
        if rewritten_here:  # a rewriter wants it (the mode says so when nothing else holds a frame)
            events: list[Event] = []
            frame = data if whole else data[pos:end]
            rewritten = held(self.rewriter, self.shared, head, frame, [piece], True, out, before, events)
            events.append(_seen(head, size, t_ns, t_ns, rewritten=rewritten))
            self._after.extend(events)
            return True
        out.append(piece)
        body = None
        if mode is ResponseMode.DEFER:
            body = (memoryview(data) if view is None else view)[pos + 8 : end]
        self._after.append(_Finish(head, None, size, t_ns, t_ns, body))
        return True

    def _mode_of(self, head: InFlight, size: int) -> ResponseMode:
        """How the response of ``size`` bytes to ``head`` is handled (``response_mode``)."""
        rewrite = (self.rewriter is not None and head.api_key >= 0
                   and self.rewriter.wants(head.api_key, head.api_version))
        return response_mode(api_key=head.api_key, size=size, decoded=head.info is not None,
                             rewrite=rewrite, sasl_handshake=head.sasl_mechanism is not None)

    def after_write(self) -> list[Event]:
        """Run what ``forward`` left for after the write; every other event, in order."""
        events: list[Event] = []
        pending, self._after = self._after, []
        for item in pending:
            if isinstance(item, _Finish):
                feeder = item.feeder
                if feeder is not None:
                    info = feeder.finish()
                    _exchange_complete(self.shared, item.cur, info, feeder.error, item.size, item.t_first, item.t_last,
                                            events)
                elif item.body is not None:
                    info, error = run_direct(_response_twin(item.cur, self.wait_time_tag).direct, item.body)
                    _exchange_complete(self.shared, item.cur, info, error, item.size, item.t_first, item.t_last, events)
                events.append(_seen(item.cur, item.size, item.t_first, item.t_last, rewritten=False))
            elif isinstance(item, tuple):
                item[0].feed(item[1])
            else:
                events.append(item)
        return events

    def digested(self, skeleton: bytes, stats: bytes, t_ns: int) -> list[Event]:
        """The body of the Fetch answer under way, which ended at ``t_ns``, read by the native core
        (its size and correlation id came through ``forward``, nothing of its body): its digest
        (``digested.py``) parsed and its records' figures put back; the answer's events."""
        cur = self._current
        if cur is None or self._left != self._size - 4 or self._mode is not ResponseMode.DEFER \
                or not isinstance(cur.info, fetch.FetchRequestInfo):
            raise FramingError("the native core's digest of a Fetch answer came where no Fetch answer had begun")
        info, error = digested.read(_response_twin(cur, self.wait_time_tag).direct, skeleton, stats)
        self._current = None
        self._feeder = None
        self._left = 0
        events: list[Event] = []
        _exchange_complete(self.shared, cur, info, error, self._size, self._t_first, t_ns, events)
        events.append(_seen(cur, self._size, self._t_first, t_ns, rewritten=False))
        return events

    def _start(self, t_ns: int, out: list[Segment]) -> None:
        prefix = bytes(self._prefix)
        size = frame_size(prefix, self.max_frame_bytes, "response")
        in_flight = self.shared.in_flight
        if not in_flight:
            raise FramingError("response from the broker matches no request")
        head = in_flight[0]
        if head.api_key != SASL_TOKEN:
            if size < 4:
                raise FramingError(f"response frame of {size} bytes has no correlation id")
            _check_correlation(be_i32(prefix, 4), head)
        in_flight.popleft()
        self._current = head
        self._size = size
        self._left = size - (len(self._prefix) - 4)
        self._t_first = t_ns
        self._mode = mode = self._mode_of(head, size)
        if mode is ResponseMode.HOLD:
            self._hold = list(self._prefix_pieces)
        else:
            out.extend(self._prefix_pieces)
            self._tail = []
        self._feeder = Feeder(_response_twin(head, self.wait_time_tag)) if head.info is not None else None
        self._prefix = bytearray()
        self._prefix_pieces = []

    def _finish(self, t_ns: int, out: list[Segment], before: list[Event]) -> None:
        cur = self._current
        if cur is None:  # _start always precedes
            raise FramingError("response ended before it began")
        self._current = None
        mode = self._mode
        feeder, self._feeder = self._feeder, None
        if mode is ResponseMode.PASS or mode is ResponseMode.DEFER:
            self._after.append(_Finish(cur, feeder, self._size, self._t_first, t_ns))
            return
        events: list[Event] = []
        rewritten = False
        info = feeder.finish() if feeder is not None else None
        if mode is ResponseMode.HOLD:
            pieces, self._hold = self._hold, []
            # a Fetch/ShareFetch/Produce the codec read whole and whose NodeEndpoints is empty names no
            # broker: forwarded as it came, without the walk a rewrite needs
            names_brokers = not (cur.api_key in (apis.FETCH, apis.PRODUCE, apis.SHARE_FETCH) and info is not None
                                 and not info.node_endpoints)
            rewriter = self.rewriter
            rewrite = rewriter is not None and names_brokers and rewriter.wants(cur.api_key, cur.api_version)
            if rewrite or cur.sasl_mechanism is not None:
                # held frames are small, or must be rewritten whole
                rewritten = held(rewriter, self.shared, cur, b"".join(pieces), pieces, rewrite, out, before, events)
            else:
                out.extend(pieces)
        if feeder is not None:
            _exchange_complete(self.shared, cur, info, feeder.error, self._size, self._t_first, t_ns, events)
        if mode is ResponseMode.STREAM_HELD_TAIL:
            tail, self._tail = self._tail, []
            last = events[-1] if events else None
            if isinstance(last, FetchExchanged) and last.response.node_endpoints:
                raise FramingError(
                    f"a streamed Fetch v{cur.api_version} response of {self._size + 4} bytes names brokers in "
                    "NodeEndpoints (a leader moved); its size went out before the tag could be rewritten, so "
                    "the connection is closed before the client sees it (the client refetches through the proxy)")
            out.extend(tail)
        events.append(_seen(cur, self._size, self._t_first, t_ns, rewritten=rewritten))
        self._after.extend(events)

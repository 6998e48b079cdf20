"""One client<->broker connection, both directions, as a sans-I/O state machine.

Owns: framing (with a maximum frame size), request/response correlation (responses come
back in request order; Produce with acks=0 gets none), raw SASL token frames after
SaslHandshake v0, and the hold-or-stream decision for each response.

Requests are forwarded by the caller *before* they are observed here (same bytes object).
Responses are returned as output segments: a streamed response is forwarded chunk by chunk
as the very objects received (or memoryview slices where a chunk holds a frame boundary);
a response a rewriter wants is held whole, then forwarded untouched or rewritten.
Must never: do I/O, read clocks, or copy a payload it does not rewrite.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from . import apis, fetch, produce
from .errors import DecodeError, FramingError, ProtocolError
from .events import (
    BrokersLearned,
    DecodeFailed,
    Event,
    FetchExchanged,
    ProduceExchanged,
    RequestSeen,
    ResponseSeen,
    SaslPassthroughStarted,
    TopicIdsLearned,
)
from .headers import RequestHeader, parse_request_header
from .primitives import I16, I32, Buf, read_fixed, read_string
from .rewrite import ResponseRewriter
from .sessions import Covered, FetchSessions
from .stream import Feeder

DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024
REQUEST_PEEK_BYTES: Final = 512  # header + what we read of a body; the rest is skipped
# A Fetch/Produce request up to this size that arrives in pieces is parsed once whole (the pieces
# are kept as references until it ends; one join), not by the generator piece by piece.
REQUEST_COLLECT_BYTES: Final = 1 << 20
SASL_TOKEN: Final = -1  # pseudo api key of a raw SASL token exchange
SASL_ROUNDS: Final[dict[str, int]] = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}

Segment = bytes | memoryview


@dataclass(slots=True)
class InFlight:
    correlation_id: int
    api_key: int
    api_version: int
    client_id: str | None
    t_request_ns: int
    sasl_mechanism: str | None = None
    info: fetch.FetchRequestInfo | produce.ProduceRequestInfo | None = None
    covered: Covered = ()
    request_bytes: int = 0


# A response a rewriter wants is held whole, except a Fetch v16+ response larger than this: it
# streams, and only its last STREAM_TAIL_BYTES wait until the top-level tags have been read.
HOLD_LIMIT_BYTES = 1 << 20
STREAM_TAIL_BYTES = 4 << 10  # any held-back byte would do: a client acts only on a whole frame


def observed(api_key: int, api_version: int) -> bool:
    """Fetch and Produce exchanges are decoded for the latency model."""
    if api_key == apis.FETCH:
        return fetch.MIN_VERSION <= api_version <= fetch.MAX_VERSION
    if api_key == apis.PRODUCE:
        return produce.MIN_VERSION <= api_version <= produce.MAX_VERSION
    return False


def _frame_size(raw: bytes, max_frame_bytes: int, side: str) -> int:
    size = int.from_bytes(raw, "big", signed=True)
    if size <= 0:
        raise FramingError(f"{side} frame size {size} is not positive")
    if size > max_frame_bytes:
        raise FramingError(
            f"{side} frame of {size} bytes exceeds the limit of {max_frame_bytes} "
            "(raise max_frame_bytes if this is legitimate)"
        )
    return size


def _produce_acks(api_version: int, buf: Buf, pos: int) -> int:
    flexible = api_version >= 9
    _, pos = read_string(buf, pos, flexible)  # TransactionalId
    acks, _ = read_fixed(I16, buf, pos)
    return acks


def _sasl_mechanism(api_version: int, buf: Buf, pos: int) -> str | None:
    mech, _ = read_string(buf, pos, flexible=False)
    return mech


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
    """A streamed response that ended, its parse deferred (``defer_parsing``)."""

    cur: InFlight
    feeder: Feeder | None
    size: int
    t_first: int
    t_last: int


class KafkaConnection:
    """Decodes one client<->broker connection. Never does I/O."""

    def __init__(
        self,
        *,
        rewriter: ResponseRewriter | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        wait_time_tag: int | None = None,
        defer_parsing: bool = False,
    ) -> None:
        """``defer_parsing``: the parse of a streamed response (and its events) waits for
        ``complete_deferred()``, which the caller runs once the bytes were handed on, so the
        parse is off the forwarding path. Held responses are parsed before they go out."""
        self.rewriter = rewriter
        self.defer_parsing = defer_parsing
        self._b_pending: list[tuple[Feeder, Segment] | _Finish] = []
        self.max_frame_bytes = max_frame_bytes
        self.wait_time_tag = wait_time_tag
        self.sessions = FetchSessions()
        self.in_flight: deque[InFlight] = deque()
        self.passthrough = False  # set after raw SASL of unknown shape: forward blindly
        self._sasl_raw_rounds = 0
        self._sasl_pending_mech: str | None = None
        # client side
        self._c_size_buf = b""
        self._c_left = 0
        self._c_peek = bytearray()
        self._c_peek_want = 0
        self._c_size = 0
        self._c_header: RequestHeader | None = None
        self._c_feeder: Feeder | None = None
        # broker side
        self._b_prefix = bytearray()
        self._b_prefix_pieces: list[Segment] = []
        self._b_left = 0
        self._b_size = 0
        self._b_hold: list[Segment] | None = None
        self._b_tail: list[Segment] | None = None  # a guarded stream's held-back last bytes
        self._b_current: InFlight | None = None
        self._b_t_first = 0
        self._b_feeder: Feeder | None = None

    @property
    def client_mid_frame(self) -> bool:
        """A request has begun arriving and has not finished."""
        return self._c_left > 0 or bool(self._c_size_buf)

    # ------------------------------------------------------------------ client -> broker
    def receive_from_client(self, data: bytes, t_ns: int) -> list[Event]:
        if self.passthrough:
            return []
        events: list[Event] = []
        pos, n = 0, len(data)
        while pos < n:
            if self._c_left == 0:
                take = min(4 - len(self._c_size_buf), n - pos)
                self._c_size_buf += data[pos : pos + take]
                pos += take
                if len(self._c_size_buf) == 4:
                    self._c_size = self._c_left = _frame_size(self._c_size_buf, self.max_frame_bytes, "request")
                    self._c_size_buf = b""
                    self._c_peek = bytearray()
                    self._c_peek_want = min(self._c_size, REQUEST_PEEK_BYTES)
                continue
            if len(self._c_peek) < self._c_peek_want:
                take = min(self._c_peek_want - len(self._c_peek), n - pos)
                self._c_peek += data[pos : pos + take]
                if len(self._c_peek) == self._c_peek_want:
                    self._peek_complete()
            else:
                take = min(self._c_left, n - pos)
                if self._c_feeder is not None:
                    self._c_feeder.feed(data if take == n else memoryview(data)[pos : pos + take])
            pos += take
            self._c_left -= take
            if self._c_left == 0:
                self._request_complete(t_ns, events)
        return events

    def _peek_complete(self) -> None:
        """The first bytes of a request are in: read its header, start its body parser."""
        self._c_header = None
        self._c_feeder = None
        if self._sasl_raw_rounds > 0:
            return
        try:
            header = parse_request_header(self._c_peek)
        except DecodeError:
            return
        self._c_header = header
        if observed(header.api_key, header.api_version):
            mod = fetch if header.api_key == apis.FETCH else produce
            v = header.api_version
            self._c_feeder = Feeder(mod.parse_request(v), lambda b: mod.parse_request_now(b, v),
                                    collect=self._c_size <= REQUEST_COLLECT_BYTES)
            self._c_feeder.feed(bytes(self._c_peek[header.body_start :]))

    def _request_complete(self, t_ns: int, events: list[Event]) -> None:
        peek = self._c_peek
        feeder, self._c_feeder = self._c_feeder, None
        if self._sasl_raw_rounds > 0:
            self._sasl_raw_rounds -= 1
            self.in_flight.append(InFlight(-1, SASL_TOKEN, 0, None, t_ns))
            return
        header = self._c_header
        if header is None:
            # The first 8 bytes always hold key, version and correlation id; only an
            # oversized client id can push the rest of the header past the peek window.
            if len(peek) < 8:
                raise FramingError(f"request of {len(peek)} bytes is too short for a header") from None
            key, _ = read_fixed(I16, peek, 0)
            ver, _ = read_fixed(I16, peek, 2)
            corr, _ = read_fixed(I32, peek, 4)
            events.append(DecodeFailed(api_key=key, api_version=ver, direction="request",
                                       reason="request header longer than the peek window"))
            self.in_flight.append(InFlight(corr, key, ver, None, t_ns))
            events.append(RequestSeen(correlation_id=corr, api_key=key, api_version=ver, client_id=None,
                                      size_bytes=self._c_size, expects_response=True, t_ns=t_ns))
            return
        expects = True
        mech = None
        info = None
        covered: Covered = ()
        try:
            if header.api_key == apis.PRODUCE and header.api_version >= 3:
                # read from the first bytes, not the full parse: correlation must not depend on
                # the whole body decoding
                expects = _produce_acks(header.api_version, peek, header.body_start) != 0
            elif header.api_key == apis.SASL_HANDSHAKE and header.api_version == 0:
                mech = _sasl_mechanism(header.api_version, peek, header.body_start)
        except DecodeError as exc:
            events.append(DecodeFailed(api_key=header.api_key, api_version=header.api_version,
                                       direction="request", reason=str(exc)))
        if feeder is not None:
            info = feeder.finish()
            if info is None:
                events.append(DecodeFailed(api_key=header.api_key, api_version=header.api_version,
                                           direction="request", reason=feeder.error or "undecodable"))
            elif isinstance(info, fetch.FetchRequestInfo):
                covered = self.sessions.covered(info)
        if expects:
            self.in_flight.append(InFlight(header.correlation_id, header.api_key, header.api_version,
                                           header.client_id, t_ns, mech, info, covered, self._c_size))
        elif isinstance(info, produce.ProduceRequestInfo):  # acks=0: the request is all there is
            events.append(ProduceExchanged(
                correlation_id=header.correlation_id, client_id=header.client_id, api_version=header.api_version,
                request=info, response=None, t_request_ns=t_ns, t_first_ns=t_ns, t_last_ns=t_ns,
                request_bytes=self._c_size, response_bytes=0))
        events.append(RequestSeen(
            correlation_id=header.correlation_id, api_key=header.api_key, api_version=header.api_version,
            client_id=header.client_id, size_bytes=self._c_size, expects_response=expects, t_ns=t_ns,
        ))

    # ------------------------------------------------------------------ broker -> client
    def receive_from_broker(self, data: bytes, t_ns: int) -> tuple[list[Segment], list[Event]]:
        if self.passthrough:
            return [data], []
        out: list[Segment] = []
        events: list[Event] = []
        view: memoryview | None = None
        pos, n = 0, len(data)
        while pos < n:
            if self._b_current is None:
                # collect the 4-byte size and (for Kafka frames) the 4-byte correlation id
                want = 8 if not (self.in_flight and self.in_flight[0].api_key == SASL_TOKEN) else 4
                take = min(want - len(self._b_prefix), n - pos)
                if view is None:
                    view = memoryview(data)
                self._b_prefix += view[pos : pos + take]
                self._b_prefix_pieces.append(data if (pos == 0 and take == n) else view[pos : pos + take])
                pos += take
                if len(self._b_prefix) == want:
                    self._start_response(t_ns, out)
                    if self._b_left == 0:
                        self._finish_response(t_ns, out, events)
                continue
            take = min(self._b_left, n - pos)
            if pos == 0 and take == n:
                piece: Segment = data  # the common case: forward the very object received
            else:
                if view is None:
                    view = memoryview(data)
                piece = view[pos : pos + take]
            if self._b_hold is not None:
                self._b_hold.append(piece)
            elif self._b_tail is not None and self._b_left - take < STREAM_TAIL_BYTES:
                cut = max(0, self._b_left - STREAM_TAIL_BYTES)  # bytes of this piece before the tail
                if cut:
                    out.append(piece[:cut])
                self._b_tail.append(piece[cut:] if cut else piece)
            else:
                out.append(piece)
            if self._b_feeder is not None:
                if self.defer_parsing and self._b_hold is None and self._b_tail is None:
                    self._b_pending.append((self._b_feeder, piece))
                else:
                    self._b_feeder.feed(piece)
            pos += take
            self._b_left -= take
            if self._b_left == 0:
                self._finish_response(t_ns, out, events)
        if len(out) > 1 and view is not None and _covers(out, data):
            out = [data]  # frames cut apart only by the parse: one object, one write
        return out, events

    def _start_response(self, t_ns: int, out: list[Segment]) -> None:
        size = _frame_size(bytes(self._b_prefix[:4]), self.max_frame_bytes, "response")
        if not self.in_flight:
            raise FramingError("response from the broker matches no request")
        head = self.in_flight[0]
        if head.api_key != SASL_TOKEN:
            if size < 4:
                raise FramingError(f"response frame of {size} bytes has no correlation id")
            corr = int.from_bytes(self._b_prefix[4:8], "big", signed=True)
            if corr != head.correlation_id:
                raise FramingError(
                    f"response correlation id {corr} does not match the oldest request's {head.correlation_id}"
                )
        self.in_flight.popleft()
        self._b_current = head
        self._b_size = size
        self._b_left = size - (len(self._b_prefix) - 4)
        self._b_t_first = t_ns
        self._b_tail = None
        if head.sasl_mechanism is not None or (
            self.rewriter is not None and head.api_key >= 0 and self.rewriter.wants(head.api_key, head.api_version)
        ):
            if head.api_key == apis.FETCH and size > HOLD_LIMIT_BYTES and head.info is not None:
                # a big Fetch v16+ response: a broker lists NodeEndpoints only beside partitions that
                # failed (no records), so stream it, holding back its last bytes (where the tag lives)
                out.extend(self._b_prefix_pieces)
                self._b_hold = None
                self._b_tail = []
            else:
                self._b_hold = list(self._b_prefix_pieces)
        else:
            out.extend(self._b_prefix_pieces)
            self._b_hold = None
        self._b_feeder = None
        if head.info is not None:
            v, tag = head.api_version, self.wait_time_tag
            if head.api_key == apis.FETCH:
                self._b_feeder = Feeder(fetch.parse_response(v, tag, after_correlation_id=True),
                                        lambda b: fetch.parse_response_now(b, v, tag, after_correlation_id=True))
            else:
                self._b_feeder = Feeder(produce.parse_response(v, after_correlation_id=True),
                                        lambda b: produce.parse_response_now(b, v, after_correlation_id=True))
        self._b_prefix = bytearray()
        self._b_prefix_pieces = []

    def complete_deferred(self) -> list[Event]:
        """Run the parses ``receive_from_broker`` deferred; their events, in order."""
        events: list[Event] = []
        pending, self._b_pending = self._b_pending, []
        for item in pending:
            if isinstance(item, _Finish):
                if item.feeder is not None:
                    self._exchange_complete(item.cur, item.feeder, item.size, item.t_first, item.t_last, events)
                events.append(ResponseSeen(
                    correlation_id=item.cur.correlation_id, api_key=item.cur.api_key,
                    api_version=item.cur.api_version, client_id=item.cur.client_id, size_bytes=item.size,
                    t_request_ns=item.cur.t_request_ns, t_first_ns=item.t_first, t_last_ns=item.t_last,
                    rewritten=False))
            else:
                item[0].feed(item[1])
        return events

    def _finish_response(self, t_ns: int, out: list[Segment], events: list[Event]) -> None:
        cur = self._b_current
        assert cur is not None  # set by _start_response, which always precedes
        if self.defer_parsing and self._b_hold is None and self._b_tail is None:
            self._b_pending.append(_Finish(cur, self._b_feeder, self._b_size, self._b_t_first, t_ns))
            self._b_feeder = None
            self._b_current = None
            return
        if self._b_pending:
            events.extend(self.complete_deferred())  # earlier responses' events come first
        rewritten = False
        info = self._b_feeder.finish() if self._b_feeder is not None else None
        if self._b_hold is not None:
            pieces = self._b_hold
            new = None
            # a Fetch/Produce the codec read whole and whose NodeEndpoints is empty names no
            # broker: forwarded as it came, without the walk a rewrite needs
            names_brokers = not (cur.api_key in (apis.FETCH, apis.PRODUCE) and info is not None
                                 and not info.node_endpoints)
            rewrite = self.rewriter is not None and names_brokers and self.rewriter.wants(cur.api_key,
                                                                                          cur.api_version)
            if rewrite or cur.sasl_mechanism is not None:
                frame = b"".join(pieces)  # held frames are small, or must be rewritten whole
                body = memoryview(frame)[4:]
                if rewrite:
                    assert self.rewriter is not None
                    try:
                        result = self.rewriter.rewrite(cur.api_key, cur.api_version, body)
                    except ProtocolError as exc:
                        events.append(DecodeFailed(api_key=cur.api_key, api_version=cur.api_version,
                                                   direction="response", reason=str(exc)))
                    else:
                        new = result.body
                        if result.learned:
                            events.append(BrokersLearned(api_key=cur.api_key, brokers=tuple(result.learned)))
                        if result.topic_ids:
                            events.append(TopicIdsLearned(topics=tuple(result.topic_ids)))
                if cur.sasl_mechanism is not None:
                    self._after_sasl_handshake_v0(cur.sasl_mechanism, body, events)
            if new is not None:
                out.append(len(new).to_bytes(4, "big") + new)
                rewritten = True
            else:
                out.extend(pieces)
            self._b_hold = None
        if self._b_feeder is not None:
            self._exchange_complete(cur, self._b_feeder, self._b_size, self._b_t_first, t_ns, events)
            self._b_feeder = None
        if self._b_tail is not None:
            tail, self._b_tail = self._b_tail, None
            last = events[-1] if events else None
            if isinstance(last, FetchExchanged) and last.response.node_endpoints:
                raise FramingError(
                    f"a streamed Fetch v{cur.api_version} response of {self._b_size + 4} bytes names brokers in "
                    "NodeEndpoints (a leader moved); its size went out before the tag could be rewritten, so "
                    "the connection is closed before the client sees it (the client refetches through the proxy)")
            out.extend(tail)
        events.append(ResponseSeen(
            correlation_id=cur.correlation_id, api_key=cur.api_key, api_version=cur.api_version,
            client_id=cur.client_id, size_bytes=self._b_size, t_request_ns=cur.t_request_ns,
            t_first_ns=self._b_t_first, t_last_ns=t_ns, rewritten=rewritten,
        ))
        self._b_current = None

    def _exchange_complete(self, cur: InFlight, feeder: Feeder, size: int, t_first: int, t_ns: int,
                           events: list[Event]) -> None:
        info = feeder.finish()
        if info is None:
            events.append(DecodeFailed(api_key=cur.api_key, api_version=cur.api_version, direction="response",
                                       reason=feeder.error or "undecodable"))
            return
        if isinstance(cur.info, fetch.FetchRequestInfo):
            self.sessions.on_response(cur.info, info, cur.covered)
            events.append(FetchExchanged(
                correlation_id=cur.correlation_id, client_id=cur.client_id, api_version=cur.api_version,
                request=cur.info, response=info, covered=cur.covered, t_request_ns=cur.t_request_ns,
                t_first_ns=t_first, t_last_ns=t_ns, request_bytes=cur.request_bytes, response_bytes=size + 4))
        elif isinstance(cur.info, produce.ProduceRequestInfo):
            events.append(ProduceExchanged(
                correlation_id=cur.correlation_id, client_id=cur.client_id, api_version=cur.api_version,
                request=cur.info, response=info, t_request_ns=cur.t_request_ns, t_first_ns=t_first,
                t_last_ns=t_ns, request_bytes=cur.request_bytes, response_bytes=size + 4))

    def _after_sasl_handshake_v0(self, mechanism: str, body: memoryview, events: list[Event]) -> None:
        try:
            code, _ = read_fixed(I16, body, 4)
        except DecodeError:
            return
        if code != 0:
            return
        rounds = SASL_ROUNDS.get(mechanism.upper())
        if rounds is None:
            self.passthrough = True
            events.append(SaslPassthroughStarted(mechanism=mechanism))
        else:
            self._sasl_raw_rounds = rounds


"""Client -> broker: the request stream of one connection, decoded after it was forwarded.

Owns: request framing (with the frame limit), the header of every request, what correlation
needs from the first bytes (acks of a Produce, the mechanism of a SaslHandshake v0), and the
Fetch/ShareFetch/Produce request parse. The caller forwards the very bytes object first, then hands it
here. Must never: do I/O, read clocks, or copy more than a request's first bytes (a small
Fetch/Produce request that arrives in pieces is kept as references and joined once).
"""

from __future__ import annotations

from typing import Final

from . import apis, digested, fetch, fetch_now, produce, produce_now, share, share_now
from .errors import DecodeError, FramingError
from .events import DecodeFailed, Event, ProduceExchanged, ProduceSent, RequestSeen
from .framing import frame_size
from .headers import RequestHeader, parse_request_header
from .inflight import SASL_TOKEN, InFlight, Shared, observed
from .primitives import I16, I32, Buf, read_fixed, read_string
from .sessions import Covered
from .stream import Feeder, Twin, run_direct

REQUEST_PEEK_BYTES: Final = 512  # header + what we read of a body; the rest is skipped
UNREADABLE_HEADER: Final = "request header longer than the peek window"  # a DecodeFailed's reason
# A Fetch/Produce request up to this size that arrives in pieces is parsed once whole (the pieces
# are kept as references until it ends; one join), not by the generator piece by piece.
REQUEST_COLLECT_BYTES: Final = 1 << 20


def _produce_acks(api_version: int, buf: Buf, pos: int) -> int:
    flexible = api_version >= 9
    _, pos = read_string(buf, pos, flexible)  # TransactionalId
    acks, _ = read_fixed(I16, buf, pos)
    return acks


def _sasl_mechanism(buf: Buf, pos: int) -> str | None:
    mech, _ = read_string(buf, pos, flexible=False)
    return mech


_TWINS: Final[dict[tuple[int, int], Twin]] = {}


def _twin(api_key: int, v: int) -> Twin:
    if api_key == apis.FETCH:
        return Twin(lambda: fetch.parse_request(v), lambda b: fetch_now.parse_request_now(b, v))
    if api_key == apis.SHARE_FETCH:
        return Twin(lambda: share.parse_request(v), lambda b: share_now.parse_request_now(b, v))
    return Twin(lambda: produce.parse_request(v), lambda b: produce_now.parse_request_now(b, v))


def _request_twin(api_key: int, api_version: int) -> Twin:
    key = (api_key, api_version)
    twin = _TWINS.get(key)
    if twin is None:
        twin = _TWINS[key] = _twin(api_key, api_version)
    return twin


def _request_feeder(header: RequestHeader, size: int) -> Feeder:
    return Feeder(_request_twin(header.api_key, header.api_version), collect=size <= REQUEST_COLLECT_BYTES)


class RequestDecoder:
    """Frames and decodes the requests of one connection. Never does I/O."""

    def __init__(self, shared: Shared, max_frame_bytes: int) -> None:
        self.shared = shared
        self.max_frame_bytes = max_frame_bytes
        self._size_buf = b""
        self._left = 0
        self._peek = bytearray()
        self._peek_want = 0
        self._size = 0
        self._header: RequestHeader | None = None
        self._feeder: Feeder | None = None

    @property
    def mid_frame(self) -> bool:
        """A request has begun arriving and has not finished."""
        return self._left > 0 or bool(self._size_buf)

    def receive(self, data: bytes, t_ns: int) -> list[Event]:
        if self.shared.passthrough:
            return []
        events: list[Event] = []
        pos, n = 0, len(data)
        while pos < n:
            if self._left == 0 and not self._size_buf and n - pos >= 4:
                size = frame_size(data, self.max_frame_bytes, "request", pos)
                if n - pos - 4 >= size:  # the common case: the whole request in this chunk
                    self._whole(data, pos + 4, size, t_ns, events)
                    pos += 4 + size
                    continue
                self._size = self._left = size
                self._peek = bytearray()
                self._peek_want = min(size, REQUEST_PEEK_BYTES)
                pos += 4
                continue
            if self._left == 0:
                take = min(4 - len(self._size_buf), n - pos)
                self._size_buf += data[pos : pos + take]
                pos += take
                if len(self._size_buf) == 4:
                    self._size = self._left = frame_size(self._size_buf, self.max_frame_bytes, "request")
                    self._size_buf = b""
                    self._peek = bytearray()
                    self._peek_want = min(self._size, REQUEST_PEEK_BYTES)
                continue
            if len(self._peek) < self._peek_want:
                take = min(self._peek_want - len(self._peek), n - pos)
                self._peek += data[pos : pos + take]
                if len(self._peek) == self._peek_want:
                    self._peek_complete()
            else:
                take = min(self._left, n - pos)
                if self._feeder is not None:
                    self._feeder.feed(data if take == n else memoryview(data)[pos : pos + take])
            pos += take
            self._left -= take
            if self._left == 0:
                self._complete(t_ns, events)
        return events

    def _whole(self, data: bytes, start: int, size: int, t_ns: int, events: list[Event]) -> None:
        """A request whose every byte is in ``data`` from ``start``: read where it lies, its
        body parsed by the direct twin (no copy of the first bytes, no Feeder)."""
        self._size = size
        peek = data[start : start + min(size, REQUEST_PEEK_BYTES)]
        header = self._header_of(peek)
        parsed = False
        info = None
        error = None
        if header is not None and observed(header.api_key, header.api_version):
            parsed = True
            twin = _request_twin(header.api_key, header.api_version)
            info, error = run_direct(twin.direct, memoryview(data)[start + header.body_start : start + size])
        self._done(peek, header, parsed, info, error, t_ns, events)

    def digested(self, head: bytes, skeleton: bytes, stats: bytes, t_ns: int) -> list[Event]:
        """A Produce request whose last byte came at ``t_ns``, read by the native core, none of its
        bytes fed here: ``head``, its size prefix and first bytes (``REQUEST_PEEK_BYTES`` of them,
        or all), and its body's digest (``digested.py``; an empty skeleton where the core could not
        follow it). Its events, as the request fed whole gives."""
        if self.mid_frame or len(head) < 12:
            raise FramingError("the native core's digest of a Produce request came in the middle of a request")
        size, _ = read_fixed(I32, head, 0)
        peek = head[4:4 + min(size, REQUEST_PEEK_BYTES)]
        self._size = size
        events: list[Event] = []
        header = self._header_of(peek)
        if header is None or header.api_key != apis.PRODUCE or not observed(header.api_key, header.api_version):
            raise FramingError("the native core's digest names a request that is not a Produce the codec reads")
        info, error = digested.read(_request_twin(header.api_key, header.api_version).direct, skeleton, stats)
        self._done(peek, header, True, info, error, t_ns, events)
        return events

    def _header_of(self, peek: Buf) -> RequestHeader | None:
        """The header a request's first bytes hold: None when unreadable, or when raw SASL
        tokens are due (they have none)."""
        if self.shared.sasl_raw_rounds > 0:
            return None
        try:
            return parse_request_header(peek)
        except DecodeError:
            return None

    def _peek_complete(self) -> None:
        """The first bytes of a request are in: read its header, start its body parser."""
        self._header = None
        self._feeder = None
        if self.shared.sasl_raw_rounds > 0:
            return
        try:
            header = parse_request_header(self._peek)
        except DecodeError:
            return
        self._header = header
        if observed(header.api_key, header.api_version):
            self._feeder = _request_feeder(header, self._size)
            self._feeder.feed(bytes(self._peek[header.body_start :]))

    def _complete(self, t_ns: int, events: list[Event]) -> None:
        feeder, self._feeder = self._feeder, None
        info = feeder.finish() if feeder is not None else None
        self._done(self._peek, self._header, feeder is not None, info, feeder.error if feeder is not None else None,
                   t_ns, events)

    def _done(self, peek: Buf, header: RequestHeader | None, parsed: bool,
              info: fetch.FetchRequestInfo | produce.ProduceRequestInfo | None, error: str | None,
              t_ns: int, events: list[Event]) -> None:
        """A request ended: its first bytes, its header (None: unreadable), and its body's
        parse when it was one (``parsed``; ``info`` None with ``error`` when it failed)."""
        shared = self.shared
        if shared.sasl_raw_rounds > 0:
            shared.sasl_raw_rounds -= 1
            shared.in_flight.append(InFlight(-1, SASL_TOKEN, 0, None, t_ns))
            return
        if header is None:
            # The first 8 bytes always hold key, version and correlation id; only an
            # oversized client id can push the rest of the header past the peek window.
            if len(peek) < 8:
                raise FramingError(f"request of {len(peek)} bytes is too short for a header") from None
            key, _ = read_fixed(I16, peek, 0)
            ver, _ = read_fixed(I16, peek, 2)
            corr, _ = read_fixed(I32, peek, 4)
            events.append(DecodeFailed(api_key=key, api_version=ver, direction="request",
                                       reason=UNREADABLE_HEADER))
            shared.in_flight.append(InFlight(corr, key, ver, None, t_ns))
            events.append(RequestSeen(correlation_id=corr, api_key=key, api_version=ver, client_id=None,
                                      size_bytes=self._size, expects_response=True, t_ns=t_ns))
            return
        expects = True
        mech = None
        covered: Covered = ()
        try:
            if header.api_key == apis.PRODUCE and header.api_version >= 3:
                # read from the first bytes, not the full parse: correlation must not depend on
                # the whole body decoding
                expects = _produce_acks(header.api_version, peek, header.body_start) != 0
            elif header.api_key == apis.SASL_HANDSHAKE and header.api_version == 0:
                mech = _sasl_mechanism(peek, header.body_start)
        except DecodeError as exc:
            events.append(DecodeFailed(api_key=header.api_key, api_version=header.api_version,
                                       direction="request", reason=str(exc)))
        if parsed:
            if info is None:
                events.append(DecodeFailed(api_key=header.api_key, api_version=header.api_version,
                                           direction="request", reason=error or "undecodable"))
            elif isinstance(info, fetch.FetchRequestInfo):
                covered = shared.sessions.covered(info)
        if expects:
            shared.in_flight.append(InFlight(header.correlation_id, header.api_key, header.api_version,
                                             header.client_id, t_ns, mech, info, covered, self._size))
            if isinstance(info, produce.ProduceRequestInfo):
                events.append(ProduceSent(correlation_id=header.correlation_id, client_id=header.client_id,
                                          request=info, t_request_ns=t_ns))
        elif isinstance(info, produce.ProduceRequestInfo):  # acks=0: the request is all there is
            events.append(ProduceExchanged(
                correlation_id=header.correlation_id, client_id=header.client_id, api_version=header.api_version,
                request=info, response=None, t_request_ns=t_ns, t_first_ns=t_ns, t_last_ns=t_ns,
                request_bytes=self._size, response_bytes=0))
        events.append(RequestSeen(
            correlation_id=header.correlation_id, api_key=header.api_key, api_version=header.api_version,
            client_id=header.client_id, size_bytes=self._size, expects_response=expects, t_ns=t_ns,
        ))

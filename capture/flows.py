"""TCP conversations with a broker port, fed to the proxy's own core with capture timestamps.

A conversation whose SYN is in the capture starts at its first byte. One that began before
the capture resynchronises: its client bytes are skipped (and counted) until a request frame
can be proven -- its size, api key, version and header read, and it ends exactly where the
captured bytes end or where another such frame starts -- and its broker bytes until the
response to the first request fed (size and correlation id). Both directions then go through
``proxy/conversation.py`` exactly as the proxy drives it, so the codec, latency model,
metrics and trace rows are the proxy's. While one direction waits behind a hole, the other
waits too (a response never overtakes its request). What a capture cannot give ends that
conversation's decoding with a reason, never a guess: a lost segment, TLS, bytes that are not
Kafka, a framing error, SASL without observation.

Must never: keep record contents; decide anything from one side's bytes that needs both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Final

from ..metrics.observer import Observer
from ..protocol import apis
from ..protocol.errors import DecodeError
from ..protocol.framing import DEFAULT_MAX_FRAME_BYTES
from ..protocol.headers import parse_request_header
from ..protocol.rewrite import ResponseRewriter
from ..proxy.conversation import Close, Conversation, CoreContext, Learn
from ..proxy.policy import Limits
from ..proxy.registry import BrokerRegistry
from .packets import ACK, FIN, RST, SYN, Segment, format_ip
from .reassembly import Stream, seq_diff

Endpoint = tuple[bytes, int]  # raw IP, port
SYNC_WINDOW_BYTES: Final = 4 << 20  # bytes scanned for a provable frame before giving up
MIN_REQUEST: Final = 8  # api key, version, correlation id
_TLS_RECORD: Final = (0x14, 0x15, 0x16, 0x17)

# why a conversation stopped being decoded (or ended); the summary and a metric label
COMPLETE: Final = "complete"
OPEN_AT_END: Final = "open_at_end"
LOST: Final = "lost_segment"
UNSYNCED: Final = "never_synchronised"
TLS: Final = "tls"
SASL: Final = "sasl_unobserved"
INTERNAL_ERROR: Final = "internal_error"  # a bug in fetchlat: reported, and only this conversation stops


def capture_context(observer: Observer, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                    wait_time_tag: int | None = None) -> CoreContext:
    """The proxy core's context for a capture: its rewriter reads (topic ids, brokers) and never
    rewrites; brokers learned from Metadata name connections by node id, as in the proxy. Read by
    the Python road alone (never the routed road, ``protocol/routed.py``: the resynchronisation
    below reads the Python road's table of requests in flight)."""
    return CoreContext(observer=observer, registry=BrokerRegistry(), limits=Limits(),
                       rewriter=ResponseRewriter(lambda node, host, port: None),
                       max_frame_bytes=max_frame_bytes, wait_time_tag=wait_time_tag, routed=False)


def plausible_request(buf: bytes | bytearray, pos: int, max_frame: int) -> int:
    """The size of a request frame that can start at ``pos`` (its header reads), or -1."""
    if len(buf) - pos < 4 + MIN_REQUEST:
        return -1
    size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
    if size < MIN_REQUEST or size > max_frame:
        return -1
    key = int.from_bytes(buf[pos + 4 : pos + 6], "big", signed=True)
    version = int.from_bytes(buf[pos + 6 : pos + 8], "big", signed=True)
    api = apis.table().get(key)
    if api is None or not api.valid.lo <= version <= api.valid.hi:
        return -1
    try:
        header = parse_request_header(memoryview(buf)[pos + 4 : pos + 4 + min(size, 512)])
    except DecodeError:
        return -1
    if header.body_start > size:
        return -1
    return size


def find_request_start(buf: bytearray, max_frame: int) -> int:
    """The first offset where a request frame can be proven: it reads, and it ends exactly at
    the end of ``buf`` or where another frame that reads begins. -1: none yet."""
    n = len(buf)
    for pos in range(0, max(0, n - 4 - MIN_REQUEST + 1)):
        size = plausible_request(buf, pos, max_frame)
        if size < 0:
            continue
        end = pos + 4 + size
        if end == n or (end < n and plausible_request(buf, end, max_frame) >= 0):
            return pos
    return -1


def find_response_start(buf: bytearray, correlation_id: int, max_frame: int) -> int:
    """The first offset where the response carrying ``correlation_id`` can begin, or -1."""
    want = correlation_id.to_bytes(4, "big", signed=True)
    pos = buf.find(want, 4)
    while pos >= 4:
        size = int.from_bytes(buf[pos - 4 : pos], "big", signed=True)
        if 4 <= size <= max_frame:
            return pos - 4
        pos = buf.find(want, pos + 1)
    return -1


class Flow:
    """One TCP conversation between a client and a broker port."""

    def __init__(self, conn_id: int, client: Endpoint, broker: Endpoint, ctx: CoreContext,
                 tap: Callable[[Flow, bool, bytes], None] | None = None) -> None:
        self.conn_id = conn_id
        self.tap = tap
        self.client = client
        self.broker = broker
        self.ctx = ctx
        self.to_broker = Stream()
        self.to_client = Stream()
        self.conv: Conversation | None = None
        self.responses_synced = False
        self.req_buf = bytearray()
        self.resp_buf = bytearray()
        self.skipped_bytes = 0
        self.ended: str | None = None  # why decoding stopped; None while it goes on
        self.detail = ""
        self.fin = [False, False]
        self.queue: list[tuple[bool, bytes, int]] = []  # (to_broker, chunk, t) held while the other side has a hole

    @property
    def name(self) -> str:
        return f"{format_ip(self.client[0])}:{self.client[1]} -> {format_ip(self.broker[0])}:{self.broker[1]}"

    # ------------------------------------------------------------------ packets in
    def segment(self, seg: Segment, to_broker: bool, t_ns: int) -> None:
        stream = self.to_broker if to_broker else self.to_client
        if seg.flags & SYN:
            stream.syn(seg.seq)
        if self.ended is None and len(seg.payload):
            chunks = stream.add(seg.seq, seg.payload)
            if self.tap is not None:
                for c in chunks:
                    self.tap(self, to_broker, c)
            if stream.lost:
                self.end(LOST, f"a segment of the {'client' if to_broker else 'broker'}'s bytes is not in the capture")
                return
            other = self.to_client if to_broker else self.to_broker
            if other.has_hole or self.queue:
                self.queue.extend((to_broker, c, t_ns) for c in chunks)
            else:
                for c in chunks:
                    self.deliver(to_broker, c, t_ns)
            if self.queue and not self.to_broker.has_hole and not self.to_client.has_hole:
                queued, self.queue = self.queue, []
                for side, c, t in queued:
                    if self.ended is None:
                        self.deliver(side, c, t)
        if seg.flags & (FIN | RST):
            self.fin[0 if to_broker else 1] = True
            if seg.flags & RST or all(self.fin):
                self.finish()

    def finish(self) -> None:
        """The conversation closed (or the capture ended)."""
        if self.ended is not None:
            return
        if self.to_broker.has_hole or self.to_client.has_hole:
            self.end(LOST, "the conversation ended with bytes missing from the capture")
        elif self.conv is None and (self.req_buf or self.to_broker.delivered):
            self.end(UNSYNCED, f"no request frame could be proven in {len(self.req_buf)} bytes")
        else:
            self.end(COMPLETE if all(self.fin) else OPEN_AT_END)

    def end(self, reason: str, detail: str = "") -> None:
        if self.ended is None:
            self.ended, self.detail = reason, detail
            self.req_buf = bytearray()
            self.resp_buf = bytearray()
            self.queue = []

    # ------------------------------------------------------------------ bytes in order
    def deliver(self, to_broker: bool, chunk: bytes, t_ns: int) -> None:
        if self.ended is not None:
            return
        if to_broker:
            if self.conv is None:
                self._sync_requests(chunk, t_ns)
            else:
                self._from_client(chunk, t_ns)
        elif self.conv is not None:
            if self.responses_synced:
                self._from_broker(chunk, t_ns)
            else:
                self._sync_responses(chunk, t_ns)
        else:
            self.skipped_bytes += len(chunk)  # answers to requests sent before the capture began

    def _start(self, t_ns: int) -> None:
        upstream = (format_ip(self.broker[0]), self.broker[1])
        conv = Conversation(self.ctx, conn_id=self.conn_id, listener="capture",
                            broker_label=f"{upstream[0]}:{upstream[1]}", upstream=upstream, t_ns=t_ns,
                            peer=f"{format_ip(self.client[0])}:{self.client[1]}")
        conv.upstream_connected(t_ns, upstream)
        self.conv = conv

    def _sync_requests(self, chunk: bytes, t_ns: int) -> None:
        if self.to_broker.started_with_syn and not self.req_buf:
            self._start(t_ns)
            self.responses_synced = self.to_client.started_with_syn or not self.to_client.delivered
            self._from_client(chunk, t_ns)
            return
        self.req_buf += chunk
        if self.req_buf[0] in _TLS_RECORD and self.req_buf[1:2] == b"\x03":
            self.end(TLS, "TLS records (the capture cannot see inside)")
            return
        pos = find_request_start(self.req_buf, self.ctx.max_frame_bytes)
        if pos < 0:
            if len(self.req_buf) > SYNC_WINDOW_BYTES:
                self.skipped_bytes += len(self.req_buf)
                self.end(UNSYNCED, f"no request frame could be proven in {SYNC_WINDOW_BYTES} bytes")
            return
        self.skipped_bytes += pos
        data = bytes(self.req_buf[pos:])
        self.req_buf = bytearray()
        self._start(t_ns)
        self._from_client(data, t_ns)

    def _sync_responses(self, chunk: bytes, t_ns: int) -> None:
        conv = self.conv
        assert conv is not None
        in_flight = conv.codec.in_flight
        if not in_flight:
            self.skipped_bytes += len(chunk)
            return
        self.resp_buf += chunk
        pos = find_response_start(self.resp_buf, in_flight[0].correlation_id, self.ctx.max_frame_bytes)
        if pos < 0:
            if len(self.resp_buf) > SYNC_WINDOW_BYTES:
                self.skipped_bytes += len(self.resp_buf)
                self.resp_buf = bytearray()
            return
        self.skipped_bytes += pos
        data = bytes(self.resp_buf[pos:])
        self.resp_buf = bytearray()
        self.responses_synced = True
        self._from_broker(data, t_ns)

    def _from_client(self, data: bytes, t_ns: int) -> None:
        conv = self.conv
        assert conv is not None
        self._actions(conv.from_client(data, t_ns))

    def _from_broker(self, data: bytes, t_ns: int) -> None:
        conv = self.conv
        assert conv is not None
        segments, before = conv.from_broker(data, t_ns)
        self._actions(before)
        if self.ended is not None:
            return
        conv.written(segments)
        self._actions(conv.after_write(t_ns, None))
        if conv.codec.shared.passthrough:
            self.end(SASL, "SASL tokens of an unknown mechanism: not observed from here on")

    def _actions(self, actions: tuple[object, ...] | list[object]) -> None:
        for a in actions:
            if isinstance(a, Close):  # the proxy would close: here decoding stops
                self.end(TLS if a.reason == "tls_on_plaintext" else a.reason or "closed", a.message)
            elif isinstance(a, Learn):
                self.ctx.registry.learn(a.brokers)


class FlowTable:
    """Every conversation of a capture with one of ``broker_ports``."""

    def __init__(self, ctx: CoreContext, broker_ports: set[int], on_end: Callable[[Flow], None] | None = None,
                 tap: Callable[[Flow, bool, bytes], None] | None = None) -> None:
        self.ctx = ctx
        self.tap = tap  # sees every chunk put back in order (to_broker, bytes): tests, debugging
        self.broker_ports = broker_ports
        self.flows: dict[tuple[Endpoint, Endpoint], Flow] = {}
        self.ended: Counter[str] = Counter()
        self.skipped_bytes = 0
        self.other_tcp = 0
        self.packets_skipped: Counter[str] = Counter()  # packets with no TCP segment, by reason (packets.py)
        self.on_end = on_end
        self._next_id = 1

    def segment(self, seg: Segment, t_ns: int) -> None:
        if (seg.dst, seg.src) in self.flows or (seg.src, seg.dst) in self.flows:
            to_broker = (seg.src, seg.dst) in self.flows
        elif seg.dst[1] in self.broker_ports and not (seg.src[1] in self.broker_ports and seg.flags & SYN
                                                     and not seg.flags & ACK):
            to_broker = True
        elif seg.src[1] in self.broker_ports:
            to_broker = False
        else:
            self.other_tcp += 1
            return
        client, broker = (seg.src, seg.dst) if to_broker else (seg.dst, seg.src)
        key = (client, broker)
        flow = self.flows.get(key)
        if (flow is not None and to_broker and seg.flags & SYN and not seg.flags & ACK
                and flow.to_broker.next_seq is not None and seq_diff(seg.seq + 1, flow.to_broker.next_seq) != 0):
            self._close(key)  # the port pair was reused by a new connection (not a repeated SYN)
            flow = None
        if flow is None:
            if seg.flags & RST or not (seg.flags & SYN or len(seg.payload)):
                return  # the last ACKs of a conversation that ended, or a reset: nothing to start
            flow = self.flows[key] = Flow(self._next_id, client, broker, self.ctx, self.tap)
            self._next_id += 1
        try:
            flow.segment(seg, to_broker, t_ns)
        except Exception as exc:  # a bug must cost one conversation, never the capture
            flow.end(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        if flow.ended is not None and (all(flow.fin) or seg.flags & RST):
            self._close(key)

    def _close(self, key: tuple[Endpoint, Endpoint]) -> None:
        flow = self.flows.pop(key)
        flow.finish()
        self.ended[flow.ended or COMPLETE] += 1
        self.skipped_bytes += flow.skipped_bytes
        if self.on_end is not None:
            self.on_end(flow)

    def close_all(self) -> None:
        """The capture ended: every conversation still open ends here."""
        for key in list(self.flows):
            self._close(key)

"""The connections the native core carries: a client connection, once its first exchange is
answered, goes from the asyncio road to the core's relay (``native/src/relay/``,
``Relay``) and stays there until it closes (``relay: auto``, the default, or ``native``;
``docs/architecture.md``, "The native core"; its bounds and timeouts: ``docs/proxy.md``).

The hand-over (``ClientSide.hand_over`` in ``session.py``): at a moment nothing of the
connection is in flight or half read either way, both transports stop reading, their sockets are
duplicated and handed to the core, and the transports are dropped (the duplicates keep the
connections open: neither peer sees anything). From then the core's thread reads both sides (the
broker's with the kernel's receive stamp), frames them, writes the bytes on as they came, and
queues what Python must see: the frames the Python road parses (Fetch, Produce, ShareFetch,
SaslHandshake v0) and the records of the exchanges it settled alone, each with its read's stamp
and the time its bytes were written on. An answer's body that arrives in many reads (a Fetch's
records) is gathered by the core and queued once, when it ends, with the earlier reads' stamps
beside it: a Fetch answer as the core's digest of it (its fields, and its records' figures
rather than their bytes: ``protocol/digested.py``), any other in pieces of a MiB; so is a
request the Python road parses, dated by its last read as ever (a big Produce as its first bytes
and the digest of its body).

This module takes that queue on the event loop in batches: at the proxy's tick (every second,
``proxy/server.py``), which costs the loop no wake-up of its own; the core wakes it
``RELAY_BATCH_NS`` (1.2 s) after a batch's first item only if the tick has not come by then, at
once for an answer to rewrite (the per-read road has no Python on it) or a pair's end, and as soon
as the queue holds ``RELAY_NOTIFY_ITEMS`` items or ``RELAY_NOTIFY_BYTES`` of bytes for Python (its
memory stays bounded at any rate). It gives each item to its connection's
``Conversation``, which runs the same codec and observer as the asyncio road: the samples and
trace rows are the same, made later. The answers the rewriter must see are held whole by the
core and answered from here at once (``CarriedConversation.answer``, the event loop's rewrite):
a sidecar's ApiVersions (the cap of the versions it can read; every address passes unchanged),
and for a proxy away from its brokers every answer that names brokers too (Metadata,
FindCoordinator, DescribeCluster, ShareFetch, ShareAcknowledge; their brokers learned, their
listeners opened, before the client sees them). A Fetch v16+ or Produce v10+ answer is held
whole too, and the core sends it on unchanged itself unless it names brokers (KIP-951's
``NodeEndpoints``, only where a partition moved: ``native/src/endpoints.rs``). The core
answers a repeat of an answer itself, as it was answered here (``relay/memo.rs``): an
ApiVersions answer at any time; one that names brokers while the brokers known stay as they
were (``brokers_changed``), queued for this module to learn from in order (``LEARN``). Every second
(``tick``) the core's counters and timers of each connection come back: the bytes counters,
the idle, partial-frame and stalled-client timeouts (the connection's ``ConnectionPolicy``
decides, as on the asyncio road), the client RTT.

A TLS client's connection is the core's from its first byte (``native/src/relay/front.rs``): its
session is rustls', and the asyncio road reads the plaintext the core bridges to it over a
socketpair (``session.ClientSide._front``) until the hand-over, which fuses the two.

A TLS broker connection is the core's from its first byte too (``bridges.py``): the asyncio road
reads its plaintext over a socketpair until the hand-over, which fuses the two.

What stays on the asyncio road: the routed road (``FETCHLAT_ROUTED``), a connection until its
first answer (the sniff of its first bytes, the upstream holds and reconnects), and one whose
hand-over moment never comes.

Must never: read a socket or write one (the core does), block on the core (every call is a lock
held for a copy).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from typing import Any, Final, Protocol

from .. import native
from ..metrics.prom import ProxyMetrics
from ..protocol import apis
from ..protocol.apis import api_name
from ..protocol.rewrite import ResponseRewriter
from ..protocol.routed import (
    RECORD_BYTES,
    RECORD_WIDTH,
    Records,
    flexible_ranges,
    record_at,
    route_ranges,
    whole_ranges,
)

log = logging.getLogger("fetchlat.proxy")


class Carried(Protocol):
    """What the drain hands a connection the core carries (``session.py``'s ``CarriedSide``): a
    protocol, so that the drain's own rules can be tested with a connection of the test's."""

    def relayed(self, from_broker: bool, data: bytes, t_ns: int, t_written_ns: int, records: Records | None,
                client_bytes: int, broker_bytes: int, handed: bytes | None = None,
                digest: tuple[bytes, bytes, bytes] | None = None) -> None: ...

    def relayed_answer(self, frame: bytes, api: tuple[int, int], t_ns: int) -> tuple[bytes, bool, bool]: ...

    def relayed_timers(self, now_ns: int, counts: tuple[int, int], client_read_ns: int, partial_since_ns: int,
                       stalled_since_ns: int, rtt_ns: int) -> None: ...

    def relayed_closed(self, reason: str, counts: tuple[int, int]) -> None: ...

    def relayed_ready(self) -> None: ...


# a drain is flat (``native/src/relay/mod.rs``, ``PyRelay::drain``): each item's fixed fields in ``heads`` (the
# records' width, read as they are), its variable parts in ``parts``, those its ``present`` names;
# literals, so the compiled loops step by a constant (tests/test_core_constants.py holds them to the core)
ITEM_WIDTH: Final = 10
ITEM_BYTES: Final = 80
assert (ITEM_WIDTH, ITEM_BYTES) == (RECORD_WIDTH, RECORD_BYTES)  # read by record_at
FROM_CLIENT: Final = 0  # an item's kinds: a read from the client, from the broker, a pair's end, an answer
FROM_BROKER: Final = 1  # held whole for the rewriter; a back's handshake completed (bridges.py)
CLOSED: Final = 2
REWRITE: Final = 3
READY: Final = 4
LEARN: Final = 5  # an answer the core repeated itself (relay/memo.rs): what it teaches, to learn
KINDS: Final = (FROM_CLIENT, FROM_BROKER, CLOSED, REWRITE, READY, LEARN)
HAS_DATA: Final = 1
HAS_RECORDS: Final = 2
HAS_HANDED: Final = 4
HAS_DIGEST: Final = 8
HAS_REASON: Final = 16
PRESENT: Final = (HAS_DATA, HAS_RECORDS, HAS_HANDED, HAS_DIGEST, HAS_REASON)

Item = tuple[int, int, int, int, bytes, bytes | None, list[str], str, tuple[int, int] | None, tuple[int, int],
             bytes | None, tuple[bytes, bytes, bytes] | None]


def items(heads: bytes, parts: list[Any]) -> list[Item]:
    """A drain's items one by one, each as ``(conn, kind, t_ns, t_written_ns, data, records,
    ids, reason, api, counts, handed, digest)`` (for the tests and the spike; ``RelayRoad.drain``
    reads the flat form in place, through the same ``item_parts``)."""
    out: list[Item] = []
    p = 0
    for off in range(0, len(heads), ITEM_BYTES):
        conn, kind, t_ns, t_written_ns, c_in, c_out, api, present, n_ids, _ = record_at(heads, off)
        data, records, handed, digest, reason, p = item_parts(parts, p, present, n_ids)
        out.append((conn, kind, t_ns, t_written_ns, data, None if records is None else records[0],
                    [] if records is None else records[1], reason, None if api < 0 else api_of(api),
                    (c_in, c_out), handed, digest))
    return out


def item_parts(parts: list[Any], p: int, present: int, n_ids: int) -> tuple[
        bytes, Records | None, bytes | None, tuple[bytes, bytes, bytes] | None, str, int]:
    """The variable parts of the item whose parts begin at ``parts[p]`` (those its ``present``
    names; ``n_ids`` client ids after its records): its bytes (b"" for none), records with their
    ids, stamps, digest, reason (""), and where the next item's parts begin."""
    data: bytes = b""
    if present & HAS_DATA:
        data = parts[p]
        p += 1
    records: Records | None = None
    if present & HAS_RECORDS:
        records = (parts[p], parts[p + 1:p + 1 + n_ids])
        p += 1 + n_ids
    handed: bytes | None = None
    if present & HAS_HANDED:
        handed = parts[p]
        p += 1
    digest: tuple[bytes, bytes, bytes] | None = None
    if present & HAS_DIGEST:
        digest = (parts[p], parts[p + 1], parts[p + 2])
        p += 3
    reason: str = ""
    if present & HAS_REASON:
        reason = parts[p]
        p += 1
    return data, records, handed, digest, reason, p


def api_of(api: int) -> tuple[int, int]:
    """An item's ``api`` field (``key << 16 | version``) as (api key, api version)."""
    return api >> 16, (api & 0xFFFF) - ((api & 0x8000) << 1)


def relay_road(choice: str, sidecar: bool, upstream_tls: tuple[str | None, str | None, str | None] | None,
               routed: bool, max_frame_bytes: int, rewriter: ResponseRewriter, metrics: ProxyMetrics,
               server_tls: tuple[str, str, str | None] | None = None) -> RelayRoad | None:
    """The native core's relay where the ``relay`` setting (``choice``: auto or native) asks for it
    and it can carry the proxy's connections (the core loaded); the log says why not. A
    ``sidecar``'s relay holds only ApiVersions answers for the rewriter, a proxy away from its
    brokers every answer its rewriter wants (``RelayRoad``).
    With ``server_tls`` (the listener's certificate, key and client authority) the core holds each
    TLS client's session from its first byte (``relay/front.rs``), and with ``upstream_tls`` (the
    brokers' authority, None for the system's, and the proxy's certificate and key) each TLS
    broker connection's (``bridges.py``), where its TLS can read those files (else those connections
    stay here)."""
    if choice == "off":
        return None
    core = native.core()
    why = ("the routed road (FETCHLAT_ROUTED) is on" if routed
           else f"the native core is not loaded: {native.reason()}" if core is None
           else "the native core has no relay (an older build)" if not hasattr(core, "Relay") else None)
    if why is not None:
        log.log(logging.WARNING if choice == "native" else logging.INFO,
                "relay: %s, not used: %s; the event loop carries every connection", choice, why)
        return None
    road = RelayRoad(core, max_frame_bytes, rewriter, metrics, sidecar)
    if server_tls is not None:
        try:
            road.relay.tls_config(*server_tls)
            road.fronts_tls = True
        except ValueError as exc:  # a file OpenSSL reads and rustls does not (an encrypted key, ...)
            log.warning("relay: the native core cannot read the TLS settings (%s); TLS clients stay on the "
                        "event loop", exc)
    if upstream_tls is not None:
        ca, cert, key = upstream_tls
        ca = ca or ssl.get_default_verify_paths().cafile  # the system's authorities, as OpenSSL finds them
        try:
            if ca is None:
                raise ValueError("no file of the system's certificate authorities (give upstream_ca)")
            road.relay.upstream_tls_config(ca, cert, key)
            road.backs_tls = True
        except ValueError as exc:
            log.warning("relay: the native core cannot read the brokers' TLS settings (%s); TLS broker "
                        "connections stay on the event loop", exc)
    return road


CENTRAL_HELD_ANSWERS: Final = 4  # answers held whole at their largest at once, over a sidecar's bound


def central_held_max(sidecar: tuple[int, int], max_frame_bytes: int) -> tuple[int, int]:
    """The bytes the relay of a proxy away from its brokers may hold, for one connection and for
    all of them: a sidecar's bounds (``RELAY_HELD_MAX``), and on top of them a Fetch answer held
    whole at its largest (``max_frame_bytes``, as the event loop holds it) for one connection,
    ``CENTRAL_HELD_ANSWERS`` of them for all (``docs/proxy.md``, the relay's bounds)."""
    pair, total = sidecar
    return pair + max_frame_bytes, total + CENTRAL_HELD_ANSWERS * max_frame_bytes


class RelayRoad:
    """The core's relay and the connections it carries, by the relay's id for them."""

    def __init__(self, core: Any, max_frame_bytes: int, rewriter: ResponseRewriter, metrics: ProxyMetrics,
                 sidecar: bool = True) -> None:
        self.metrics = metrics
        self._memo_rewrites: dict[int, int] = {}  # the core's count of the rewrites it repeated, counted
        cap = rewriter.cap_versions

        def sidecar_wants(api_key: int, api_version: int) -> bool:
            return cap and api_key == apis.API_VERSIONS  # a sidecar's addresses pass unchanged

        # the Python road parses what the model reads (route_ranges without a rewriter); the
        # answers the rewriter wants are held whole (a sidecar's: ApiVersions, for the cap; a
        # proxy away from its brokers: every answer that names brokers, a Fetch or Produce answer
        # sent on unchanged by the core where it names none: native/src/endpoints.rs), their
        # exchanges settled by the core alone unless routed
        wants = sidecar_wants if sidecar else rewriter.wants
        held_max = None if sidecar else central_held_max(core.RELAY_HELD_MAX, max_frame_bytes)
        self.relay = core.Relay(max_frame_bytes, flexible_ranges(), route_ranges(None), whole_ranges(wants),
                                ask_at_answer=True,  # an exchange it settles alone: one record, its answer's
                                held_max=held_max)
        if (tuple(core.RELAY_KINDS), core.RELAY_ITEM_WIDTH, tuple(core.RELAY_PRESENT)) != (KINDS, ITEM_WIDTH, PRESENT):
            raise RuntimeError("the native core's drain is not this build's (rebuild it: make .venv/.compiled)")
        self.conns: dict[int, Carried] = {}
        self.generation = 0  # the brokers known, as the core's memo is told (brokers_changed)
        self.fronts_tls = False  # the core holds TLS clients' sessions (``relay_road``'s ``server_tls``)
        self.backs_tls = False  # the core holds TLS brokers' sessions (``relay_road``'s ``upstream_tls``)
        self._queue_full = 0  # the core's count of the times its queue filled, counted
        relay = self.relay
        metrics.relay_queue_items.set_function(lambda: float(relay.queue_depth()[0]))
        metrics.relay_queue_bytes.set_function(lambda: float(relay.queue_depth()[1]))
        metrics.relay_held_bytes.set_function(lambda: float(relay.held()[0]))
        # Any: the compiled build checks what a call returns against its declared type, and
        # uvloop's loop gives its own handles (not asyncio's) and None from remove_reader
        self._loop: Any = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.relay.notify_fd, self._notified)
        loop.add_reader(self.relay.urgent_fd, self._urgent)

    def close(self) -> None:
        """Ends every connection the core carries (each closes as the proxy's own close does)."""
        loop = self._loop
        if loop is not None:
            loop.remove_reader(self.relay.notify_fd)
            loop.remove_reader(self.relay.urgent_fd)
            self._loop = None
        self.relay.close()
        self.drain()

    def add(self, client: Carried, client_fd: int, broker_fd: int) -> int:
        """Hands the two descriptors to the core (it owns and closes them from here): the id."""
        conn = int(self.relay.add(client_fd, broker_fd))
        self.conns[conn] = client
        return conn

    def end(self, conn: int) -> None:
        """Closes a connection the core carries (its CLOSED item comes back, as every close's)."""
        self.relay.end(conn)

    def front(self, watch: Carried, client_fd: int) -> tuple[int, int]:
        """Hands a TLS client's socket to the core from its first byte (it owns and closes it from
        here): the front's id, which ``watch`` answers for until the hand-over, and the plaintext
        end of the bridge, for the event loop's road to read."""
        front, python_fd = self.relay.front(client_fd)
        self.conns[int(front)] = watch
        return int(front), int(python_fd)

    def back(self, watch: Carried, broker_fd: int, server_name: str) -> tuple[int, int]:
        """Hands a TLS broker connection's socket to the core from its first byte (it owns and
        closes it from here; ``bridges.py``): the back's id, which ``watch`` answers for until the
        hand-over, and the plaintext end of the bridge."""
        back, python_fd = self.relay.back(broker_fd, server_name)
        self.conns[int(back)] = watch
        return int(back), int(python_fd)

    def forget(self, conn: int) -> None:
        """A front or back fused into its pair at the hand-over, or given up: nothing more comes
        under its id."""
        self.conns.pop(conn, None)

    # ------------------------------------------------------------------ the queue
    def _notified(self) -> None:
        """A batch is due (the core waited ``RELAY_BATCH_NS`` after its first item and no tick
        drained it, a pair ended, or the queue is full)."""
        with contextlib.suppress(BlockingIOError):  # another wake-up read it first
            os.read(self.relay.notify_fd, 8)
        self.drain()

    def _urgent(self) -> None:
        with contextlib.suppress(BlockingIOError):  # another wake-up read it first
            os.read(self.relay.urgent_fd, 8)
        self.drain()

    def drain(self) -> None:
        """Everything queued since the last drain, to its connections, in order."""
        conns = self.conns
        heads, parts = self.relay.drain()
        p = 0
        for off in range(0, len(heads), ITEM_BYTES):
            conn, kind, t_ns, t_written_ns, c_in, c_out, api, present, n_ids, _ = record_at(heads, off)
            data, records, handed, digest, reason, p = item_parts(parts, p, present, n_ids)
            client = conns.get(conn)
            if client is None:
                continue
            try:
                if kind == CLOSED:
                    del conns[conn]
                    client.relayed_closed(reason, (c_in, c_out))
                elif kind == REWRITE:
                    self._answer(conn, client, data, api_of(api), t_ns)
                elif kind == LEARN:
                    self._learned(client, data, api_of(api), t_ns)
                elif kind == READY:
                    client.relayed_ready()
                else:
                    client.relayed(kind == FROM_BROKER, data, t_ns, t_written_ns, records, c_in, c_out, handed,
                                   digest)
            except Exception:  # one bad item costs its own connection, never the rest of the batch
                self._item_failed(conn, kind)

    def _item_failed(self, conn: int, kind: int) -> None:
        """An item raised on its way to its connection: logged with its trace (which names no
        record nor SASL byte: the item's bytes are not in it), counted, and the connection ended
        (its CLOSED item comes back as every close's; one that was closing is forgotten here)."""
        log.exception("relayed connection %d: its item (kind %d) failed; closing this connection only", conn, kind)
        self.metrics.connection_errors.labels("relay_item_failed").inc()
        if kind == CLOSED:
            return  # already gone from the core and from conns
        self.relay.end(conn)

    def _answer(self, conn: int, client: Carried, frame: bytes, api: tuple[int, int], t_ns: int) -> None:
        answer, changed, repeatable = client.relayed_answer(frame, api, t_ns)
        # the core repeats it itself while the brokers known stay as they are now (relay/memo.rs)
        self.relay.answer(conn, answer, self.generation if repeatable else None)
        if changed:
            self.metrics.rewrites.labels(api_name(api[0])).inc()

    def _learned(self, client: Carried, frame: bytes, api: tuple[int, int], t_ns: int) -> None:
        """An answer the core repeated itself: what it teaches, learned as its rewrite would (the
        frame the rewrite gives is the core's already)."""
        _, changed, _ = client.relayed_answer(frame, api, t_ns)
        if changed:
            self.metrics.rewrites.labels(api_name(api[0])).inc()

    def brokers_changed(self, generation: int) -> None:
        """The brokers the proxy knows changed (``BrokerRegistry.generation``): the answers the
        core remembered before no longer repeat."""
        self.generation = generation
        self.relay.set_generation(generation)

    # ------------------------------------------------------------------ timers
    def tick(self, now_ns: int) -> None:
        """The core's counters and timers of every connection it carries, to its conversation
        (the proxy's tick, every second): bytes, timeouts, the client RTT."""
        full = int(self.relay.queue_depth()[4])
        if full > self._queue_full:
            self.metrics.relay_queue_full.inc(full - self._queue_full)
            self._queue_full = full
        seen = self._memo_rewrites
        for key, n in self.relay.memo_rewrites().items():
            if n > seen.get(key, 0):
                self.metrics.rewrites.labels(api_name(key)).inc(n - seen.get(key, 0))
                seen[key] = n
        conns = self.conns
        for conn, from_client, from_broker, read_ns, partial_ns, stalled_ns, rtt_ns in self.relay.timers():
            client = conns.get(conn)
            if client is not None:
                client.relayed_timers(now_ns, (from_client, from_broker), read_ns, partial_ns, stalled_ns, rtt_ns)

"""One connection read by the native core first (``native/src/wire/``, ``Wire``), with only the
frames the Python road must parse routed to it: ``KafkaConnection``'s face, the next step of the
native road (``docs/architecture.md``, "The native core").

The core frames both directions, reads every request's header, matches every answer to its
request and keeps each exchange as a fixed-width record (``records()``). A request goes to the
Python road too (``route_ranges``) when its body is parsed there: a Fetch, Produce or ShareFetch
the latency model reads, a response the rewriter wants, a SaslHandshake v0. The Python road is
then fed exactly those frames, whole, size prefix included, and their answers, in order: to it
the connection looks as if only they went by, which is all its rules need (Kafka answers a
connection's requests in order). Every other frame is settled by the core alone: its bytes go
on as they came, and only its record is left.

Once a SaslHandshake v0 has gone by, its answer may turn the connection to raw SASL tokens,
which only the Python road follows: every byte the client sends after it goes to the Python road
alone, and so does every byte the broker sends from that answer on (the answers before it, to
requests the core settled alone, are still the core's).

Not yet the proxy's road by default: in this first form it costs more than it saves (counted
in instructions, ``make bench-instr``: ~4 000 more a round trip the Python road parses anyway,
~7 000 more for one the core settles alone, whose record is unpacked into Python values and
observed one by one; ``docs/performance.md``). ``FETCHLAT_ROUTED=1`` turns it on
(``enabled()``), for the tests and the benches; the step that makes it pay is the core
aggregating what its records say, drained in batches rather than per read.

Must never: do I/O, read clocks, copy a frame it does not route (a routed frame spanning the
whole chunk goes to the Python road as the very object read).
"""

from __future__ import annotations

import functools
import os
import struct
import sys
from collections.abc import Callable
from typing import Any, Final

from librt.strings import read_i64_le
from mypy_extensions import i64

from .. import native
from . import apis
from .connection import KafkaConnection
from .errors import FramingError
from .events import Event
from .framing import Segment
from .inflight import observed
from .primitives import NATIVE

ROUTED_ENV: Final = "FETCHLAT_ROUTED"


def enabled() -> bool:
    """The proxy reads its connections through the routed road (``FETCHLAT_ROUTED=1``)."""
    return os.environ.get(ROUTED_ENV, "") == "1"


# The core's records (``Wire.drain``): RECORD_WIDTH native-endian i64s each -- kind, correlation
# id, api key, api version, client id (an index into the drain's list, or -1), size, flags, the
# request's stamp, the answer's first and last stamps (``tests/test_core_constants.py`` holds
# these to the core's).
RECORD_WIDTH: Final = 10
RECORD_FORMAT: Final = f"={RECORD_WIDTH}q"
RECORD: Final = struct.Struct(RECORD_FORMAT)
RECORD_BYTES: Final = 80  # RECORD.size, a literal: the compiled build's loops over records step by a constant
assert RECORD.size == RECORD_BYTES
# the compiled build on a little-endian machine reads the fields in place (librt's reader: plain
# loads, no tuple of boxed ints per record); elsewhere the struct unpacks them
IN_PLACE: Final = NATIVE and sys.byteorder == "little"
# the relay's stamps of the reads an item gathers (``native/src/relay/gather.rs``, ``Gather``): a read's
# stamp and the time its bytes went on, native-endian i64s, a pair per read
HANDED: Final = struct.Struct("=2q")
KIND_REQUEST: Final = 1
KIND_RESPONSE: Final = 2
EXPECTS_RESPONSE: Final = 1
OBSERVED: Final = 2
HEADER_UNREADABLE: Final = 4
SASL_V0: Final = 8
ACKS_UNREADABLE: Final = 16
ROUTED: Final = 32  # the Python road made this exchange's events: the record only marks their place
ASKED: Final = 64  # an answer's record that stands for its request too (the relay's, ``ask_at_answer``)

# The versions a request header can name: every rule is constant below 0 and past a key's last
# version in the specs, and must be out to these (``route_ranges`` checks it)
TOP_VERSION: Final = 0x7FFF
BOTTOM_VERSION: Final = -0x8000
NO_EVENTS: Final[list[Event]] = []
NO_SPANS: Final[list[tuple[int, int]]] = []
Records = tuple[bytes, list[str]]  # the core's records (RECORD_FORMAT each) and the client ids they index


I10 = tuple[i64, i64, i64, i64, i64, i64, i64, i64, i64, i64]


def record_at(raw: bytes, at: i64) -> I10:
    """The record at byte ``at`` of ``raw`` (the core's records: RECORD_FORMAT each) as its ten
    fields; the compiled build returns them as a C struct of machine integers (i64: no tagging,
    no overflow check per field)."""
    if IN_PLACE:
        return (read_i64_le(raw, at), read_i64_le(raw, at + 8), read_i64_le(raw, at + 16),
                read_i64_le(raw, at + 24), read_i64_le(raw, at + 32), read_i64_le(raw, at + 40),
                read_i64_le(raw, at + 48), read_i64_le(raw, at + 56), read_i64_le(raw, at + 64),
                read_i64_le(raw, at + 72))
    got: I10 = RECORD.unpack_from(raw, at)
    return got


def route_ranges(wants: Callable[[int, int], bool] | None) -> list[tuple[int, int, int]]:
    """``(api_key, lo, hi)``: the versions of each api key whose exchanges the Python road must
    see (``observed``, or ``wants``: a rewriter's, and every Produce), for the core's ``Wire``. One range per key:
    a rule that routes versions with a gap between them is refused (ValueError), not narrowed."""
    out: list[tuple[int, int, int]] = []
    for key, api in sorted(apis.table().items()):
        last = max(api.valid.hi, 0) + 1  # past the spec's versions every rule is constant

        def routes(k: int, v: int) -> bool:
            # every Produce: an acks field the Python road cannot read is its event to report
            return k == apis.PRODUCE or observed(k, v) or (wants is not None and wants(k, v))

        if routes(key, last) != routes(key, TOP_VERSION) or routes(key, -1) != routes(key, BOTTOM_VERSION):
            raise ValueError(f"api key {key}: a route that changes below version 0 or past version {last}")
        one = _one_range(key, last, routes, "routed")
        if one is not None:
            out.append(one)
    return out


def _one_range(key: int, last: int, rule: Callable[[int, int], bool], what: str) -> tuple[int, int, int] | None:
    """``(key, lo, hi)`` of the versions -1 .. ``last`` where ``rule(key, v)`` holds, -1 and ``last``
    standing for every version below 0 and past the spec's (``BOTTOM_VERSION``, ``TOP_VERSION``);
    None where it holds at none; ValueError where they have a gap."""
    versions = [v for v in range(-1, last + 1) if rule(key, v)]
    if not versions:
        return None
    lo, hi = versions[0], versions[-1]
    if hi - lo + 1 != len(versions):
        raise ValueError(f"api key {key}: {what} versions {versions} have a gap")
    return key, BOTTOM_VERSION if lo == -1 else lo, TOP_VERSION if hi == last else hi


def whole_ranges(wants: Callable[[int, int], bool]) -> list[tuple[int, int, int]]:
    """``(api_key, lo, hi)``: the requests whose answers a rewriter wants (``wants``), for a core
    that holds those answers whole and has Python answer them (``native/src/relay/held.rs``, the
    spike's ``Relay``), on ``route_ranges``' bounds. A rule with a gap is refused (ValueError)."""
    out: list[tuple[int, int, int]] = []
    for key, api in sorted(apis.table().items()):
        one = _one_range(key, max(api.valid.hi, 0) + 1, wants, "held")
        if one is not None:
            out.append(one)
    return out


def flexible_ranges() -> list[tuple[int, int, int]]:
    """``(api_key, lo, hi)``: each api key's flexible request versions, for the core's ``Wire``."""
    return [(k, a.request_flexible.lo, a.request_flexible.hi) for k, a in apis.table().items()]


def _hold_back(out: list[Segment], n: int) -> bytes:
    """The last ``n`` bytes of ``out``, taken off its end."""
    held: list[bytes] = []
    while n:
        last = out.pop()
        if len(last) > n:
            out.append(last[:len(last) - n])
            last = last[len(last) - n:]
        held.append(bytes(last))
        n -= len(last)
    return b"".join(reversed(held))


@functools.lru_cache(maxsize=8)
def _tables(wants: Callable[[int, int], bool] | None) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """``flexible_ranges()`` and ``route_ranges(wants)``, made once per rewriter rather than per
    connection (the route table asks every version of every api key)."""
    return flexible_ranges(), route_ranges(wants)


class RoutedConnection:
    """``KafkaConnection``'s calls over the core's ``Wire`` (module docstring). ``python`` is the
    Python road's connection the routed frames go to (the caller's: it owns its fetch sessions
    and rewriter); ``wire`` a ``native.core().Wire`` made with ``route_ranges`` of the same
    rewriter."""

    def __init__(self, wire: Any, python: KafkaConnection) -> None:
        self.wire = wire
        self.python = python
        # a SaslHandshake v0 went by: every byte the client sends is the Python road's alone; its
        # answer began: every byte the broker sends
        self.requests_python_only = False
        self.python_only = False
        # the first bytes of an answer the core settles, held as the Python road holds them until
        # its size and correlation id are in (a client acts only on whole frames: the same bytes
        # go out, at the same reads, on both roads)
        self._withheld = b""
        # the core's records of the last read each way, when one of them is of an exchange it
        # settled alone (``Wire.drain_native``): the observer takes them with the read's events
        self._from_client: Records | None = None
        self._from_broker: Records | None = None

    @classmethod
    def make(cls, python: KafkaConnection, max_frame_bytes: int,
             wants: Callable[[int, int], bool] | None) -> RoutedConnection | None:
        """One over a new ``Wire``, or None where the core is not loaded."""
        core = native.core()
        if core is None:
            return None
        flexible, routes = _tables(wants)
        return cls(core.Wire(max_frame_bytes, flexible, routes, take_records=True), python)

    @property
    def in_flight(self) -> int:
        """Requests whose answers have not begun (both roads')."""
        if self.python_only:
            return len(self.python.in_flight)
        wire = self.wire
        if self.requests_python_only:  # the Python road's, and those the core settles alone
            return len(self.python.in_flight) + int(wire.in_flight) - int(wire.routed_in_flight)
        return int(wire.in_flight)

    @property
    def client_mid_frame(self) -> bool:
        return self.python.client_mid_frame if self.requests_python_only else bool(self.wire.client_mid_frame)

    def client_records(self) -> Records | None:
        """The core's records of the last read of the client's bytes: one per request, those
        routed to the Python road flagged ``ROUTED``; None when every one of them was."""
        records, self._from_client = self._from_client, None
        return records

    def broker_records(self) -> Records | None:
        """``client_records`` of the last read of the broker's bytes: one per answer."""
        records, self._from_broker = self._from_broker, None
        return records

    def receive_from_client(self, data: bytes, t_ns: int) -> list[Event]:
        """The Python road's events of the routed requests among ``data`` (read at ``t_ns``)."""
        python = self.python
        if self.requests_python_only:
            return python.receive_from_client(data, t_ns)
        try:
            routed = self.wire.from_client(data, t_ns)
        except ValueError as exc:
            raise FramingError(str(exc)) from None
        if routed is None:
            return NO_EVENTS
        if routed is True:  # one request of the Python road's, the whole read
            return python.receive_from_client(data, t_ns)
        held, spans, rest, _, self._from_client = routed  # nothing is ever pending of a request
        if not spans and rest < 0:
            return NO_EVENTS
        events = python.receive_from_client(held, t_ns) if held else []
        n = len(data)
        for start, end in spans:
            events += python.receive_from_client(data if end - start == n else data[start:end], t_ns)
        if rest >= 0:
            self.requests_python_only = True
            if rest < n:
                events += python.receive_from_client(data[rest:], t_ns)
        return events

    def forward_from_broker(self, data: bytes, t_ns: int) -> tuple[list[Segment], list[Event]]:
        """``KafkaConnection.forward_from_broker``: the segments to write (the core's frames as
        they came, the Python road's as it forwards them) and the events before writing them."""
        python = self.python
        if self.python_only:
            return python.forward_from_broker(data, t_ns)
        try:
            routed = self.wire.from_broker(data, t_ns)
        except ValueError as exc:
            raise FramingError(str(exc)) from None
        withheld = self._withheld
        n = len(data)
        if routed is True:  # one answer of the Python road's, the whole read (never after a withheld prefix)
            return python.forward_from_broker(data, t_ns)
        if routed is None:
            if not withheld:
                return [data], NO_EVENTS
            spans, rest, pending = NO_SPANS, -1, 0
        else:
            # an answer's route is known from its first byte: nothing is held for the Python road
            _, spans, rest, pending, self._from_broker = routed
            if not spans and rest < 0 and not pending and not withheld:
                return [data], NO_EVENTS
        if rest >= 0:
            self.python_only = True
        else:
            rest = n
        if not withheld and not pending and (rest == 0 or (len(spans) == 1 and spans[0] == (0, n))):
            return python.forward_from_broker(data, t_ns)
        view = memoryview(data)
        out: list[Segment] = [withheld] if withheld else []
        before: list[Event] = []
        pos = 0
        for start, end in spans:
            if start > pos:
                out.append(view[pos:start])
            segments, events = python.forward_from_broker(data[start:end], t_ns)
            out += segments
            before += events
            pos = end
        if pos < rest:
            out.append(view[pos:rest])
        if rest < n:
            segments, events = python.forward_from_broker(data[rest:], t_ns)
            out += segments
            before += events
        self._withheld = _hold_back(out, pending) if pending else b""
        return out, before

    def after_write(self) -> list[Event]:
        return self.python.after_write()

    def receive_from_broker(self, data: bytes, t_ns: int) -> tuple[list[Segment], list[Event]]:
        """For callers that only observe: the segments, and all the events at once."""
        out, before = self.forward_from_broker(data, t_ns)
        return out, before + self.after_write()

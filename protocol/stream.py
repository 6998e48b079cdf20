"""Push-parser primitives for messages that carry records (Fetch responses, Produce
requests): fed chunk by chunk as they are forwarded, they keep memory constant whatever the
frame size. Record batches are skipped by length; only their 61-byte headers are read.

A parser is a generator: it receives chunks with ``send`` and returns its result. Helpers
suspend only when a field is not yet complete in the current chunk; a field that straddles
two chunks is the only thing joined. Must never: keep a memoryview in a result, or do I/O.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from librt.strings import read_i16_be, read_i32_be, read_i64_be

from .. import native
from .errors import DecodeError
from .primitives import I8, I16, I32, I64, NATIVE, Buf, uvarint_at

T = TypeVar("T")
Parser = Generator[None, Buf, T]

# RecordBatch v2's 61-byte header, only the fields read: base offset, batch length, (leader
# epoch), magic, (crc), attributes, last offset delta, base and max timestamp, (producer id,
# epoch, base sequence), record count. Skipping the five unread fields saves their objects: a
# fetch of one-record batches reads one header per record.
BATCH_HEADER: Final = struct.Struct(">qi4xb4xhiqq14xi")
BATCH_HEADER_BYTES: Final = 61
TIMESTAMP_TYPE_LOG_APPEND: Final = 0x08
CONTROL_BATCH: Final = 0x20
MAX_ARRAY: Final = 1 << 24  # a sanity bound: arrays longer than this are corrupt
# A tag buffer holds a struct's tagged fields, a handful in any real message: one that claims more
# than this is not read (a hostile count, or millions of legal two-byte tags, would otherwise hold
# the event loop for a second per MiB, tag by tag); its message is reported as not decoded
MAX_TAGS: Final = 1 << 12
_CORE: Final = native.core()
# The native core's walk of a records blob whole in the buffer (``native/src/lib.rs``), or None:
# ``walk`` below, the same rules in Python (tests/protocol/test_batches_native.py holds the two
# to the same figures)
WALK: Final = _CORE.walk_batches if _CORE is not None else None
# and of the batches lying whole in a chunk of records that arrive in pieces (``walk``'s ``whole``)
WALK_WHOLE: Final = _CORE.walk_whole if _CORE is not None else None


class Reader:
    """The parser's window: the current chunk and a position in it."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: Buf = b"") -> None:
        self.buf: Buf = buf
        self.pos = 0


def need(r: Reader, n: int) -> Parser[int]:
    """Make ``n`` bytes contiguous at the read position; return their offset and advance."""
    avail = len(r.buf) - r.pos
    while avail < n:
        chunk = yield
        if avail == 0:
            r.buf, r.pos = chunk, 0
        else:  # a field straddles two chunks: join just that
            r.buf, r.pos = bytes(r.buf[r.pos :]) + bytes(chunk), 0
        avail = len(r.buf)
    p = r.pos
    r.pos = p + n
    return p


def skip(r: Reader, n: int) -> Parser[None]:
    """Consume ``n`` bytes without copying them."""
    while True:
        avail = len(r.buf) - r.pos
        if avail >= n:
            r.pos += n
            return
        n -= avail
        r.buf = yield
        r.pos = 0


# The fixed-size readers take the bytes straight from the chunk when they are there (the
# common case) and only fall back to ``need`` (a nested generator) when a field straddles.
def i8(r: Reader) -> Parser[int]:
    p = r.pos
    if len(r.buf) - p >= 1:
        r.pos = p + 1
    else:
        p = yield from need(r, 1)
    buf = r.buf
    if NATIVE and isinstance(buf, bytes):
        b = buf[p]
        return b - 256 if b >= 128 else b
    v: int = I8.unpack_from(buf, p)[0]
    return v


def i16(r: Reader) -> Parser[int]:
    p = r.pos
    if len(r.buf) - p >= 2:
        r.pos = p + 2
    else:
        p = yield from need(r, 2)
    buf = r.buf
    if NATIVE and isinstance(buf, bytes):
        return read_i16_be(buf, p)
    v: int = I16.unpack_from(buf, p)[0]
    return v


def i32(r: Reader) -> Parser[int]:
    p = r.pos
    if len(r.buf) - p >= 4:
        r.pos = p + 4
    else:
        p = yield from need(r, 4)
    buf = r.buf
    if NATIVE and isinstance(buf, bytes):
        return read_i32_be(buf, p)
    v: int = I32.unpack_from(buf, p)[0]
    return v


def i64(r: Reader) -> Parser[int]:
    p = r.pos
    if len(r.buf) - p >= 8:
        r.pos = p + 8
    else:
        p = yield from need(r, 8)
    buf = r.buf
    if NATIVE and isinstance(buf, bytes):
        return read_i64_be(buf, p)
    v: int = I64.unpack_from(buf, p)[0]
    return v


def uvarint_here(r: Reader) -> int | None:
    """An unsigned varint wholly in the current chunk (consumed), or None (nothing consumed)."""
    buf, p = r.buf, r.pos
    if isinstance(buf, bytes):  # compiled, indexing a bytes is a native read (a Buf's is a call)
        if p < len(buf):
            b = buf[p]
            if b < 0x80:  # one byte: nearly every length and tag count
                r.pos = p + 1
                return b
    elif p < len(buf) and buf[p] < 0x80:
        r.pos = p + 1
        return int(buf[p])
    v, p = uvarint_at(buf, p)
    if p < 0:
        return None
    r.pos = p
    return v


def uvarint(r: Reader) -> Parser[int]:
    while True:
        v, p = uvarint_at(r.buf, r.pos)
        if p >= 0:
            r.pos = p
            return v
        # the varint straddles the chunk's end: join one byte more than there is, read again
        start = yield from need(r, len(r.buf) - r.pos + 1)
        r.pos = start


def length(r: Reader, flexible: bool, wide: bool = True) -> Parser[int]:
    """An array/bytes length (int32, or int16 for classic strings); -1 is null."""
    if flexible:
        v = uvarint_here(r)
        if v is None:
            v = yield from uvarint(r)
        return v - 1
    if wide:
        return (yield from i32(r))
    return (yield from i16(r))


def array_len(r: Reader, flexible: bool) -> Parser[int]:
    n = yield from length(r, flexible)
    if n > MAX_ARRAY:
        raise DecodeError(f"array of {n} elements is beyond any real message")
    return n


def string(r: Reader, flexible: bool) -> Parser[str | None]:
    n = yield from length(r, flexible, wide=False)
    if n < 0:
        return None
    p = yield from need(r, n)
    raw = r.buf[p : p + n]
    return text_of(raw if isinstance(raw, bytes) else bytes(raw))


# A topic name recurs in every Fetch and Produce that names its topic by name, request and
# response, and so do a group's or a rack's: each distinct short string is decoded once, and the
# one str object (its hash kept) serves every parse. Past TEXTS_KEPT distinct strings the memo
# starts over; a string longer than TEXT_KEPT_BYTES is decoded every time (the memo stays small).
_TEXTS: Final[dict[bytes, str]] = {}
TEXTS_KEPT: Final = 1024
TEXT_KEPT_BYTES: Final = 255


def text_of(raw: bytes) -> str:
    """The UTF-8 text of ``raw``, through the memo; DecodeError if it is not UTF-8."""
    got = _TEXTS.get(raw)
    if got is None:
        try:
            got = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("string is not UTF-8") from None
        if len(raw) <= TEXT_KEPT_BYTES:
            if len(_TEXTS) >= TEXTS_KEPT:
                _TEXTS.clear()
            _TEXTS[raw] = got
    return got


# A topic id recurs in every Fetch and Produce (v13+) that names its topic, request and response:
# each distinct one is made a UUID once (uuid.UUID's constructor is Python code, ~1 µs). UUIDs
# are immutable, so one object serves every parse. Past UUIDS_KEPT distinct ids the memo starts
# over (a miss only builds the object again).
_UUIDS: Final[dict[bytes, _uuid.UUID]] = {}
UUIDS_KEPT: Final = 1024


def uuid_of(raw: bytes) -> _uuid.UUID:
    """The UUID of 16 bytes, through the memo."""
    got = _UUIDS.get(raw)
    if got is None:
        if len(_UUIDS) >= UUIDS_KEPT:
            _UUIDS.clear()
        got = _UUIDS[raw] = _uuid.UUID(bytes=raw)
    return got


def uuid(r: Reader) -> Parser[_uuid.UUID]:
    p = yield from need(r, 16)
    return uuid_of(bytes(r.buf[p : p + 16]))


def topic(r: Reader, flexible: bool, by_id: bool) -> Parser[tuple[str | None, _uuid.UUID | None]]:
    """A topic named by name (older versions) or by id (Fetch/Produce v13+): (name, id)."""
    if by_id:
        return None, (yield from uuid(r))
    return (yield from string(r, flexible)), None


NO_TAGS: Final[dict[str, tuple[int, bytes]]] = {}  # what an empty tag buffer yields; never changed


def tags(r: Reader, wanted: dict[int, str] | None = None) -> Parser[dict[str, tuple[int, bytes]]]:
    """Skip a tag buffer; return the raw bytes of the ``wanted`` tags (tag -> name). The dict
    returned is read, never changed: an empty tag buffer returns the one shared ``NO_TAGS``."""
    count = uvarint_here(r)
    if count is None:
        count = yield from uvarint(r)
    if count == 0:  # the common case: an empty tag buffer (a dozen in a Fetch: no dict made for each)
        return NO_TAGS
    if count > MAX_TAGS:
        raise DecodeError(f"a tag buffer of {count} tags is beyond any real message (at most {MAX_TAGS} are read)")
    found: dict[str, tuple[int, bytes]] = {}
    for _ in range(count):
        tag = yield from uvarint(r)
        size = yield from uvarint(r)
        name = wanted.get(tag) if wanted else None
        if name is not None:
            p = yield from need(r, size)
            found[name] = (tag, bytes(r.buf[p : p + size]))
        else:
            yield from skip(r, size)
    return found


@dataclass(slots=True)
class BatchStats:
    """What the headers of a records blob say (magic v2 batches)."""

    size_bytes: int = 0
    batches: int = 0
    records: int = 0
    first_offset: int = -1  # base offset of the first batch
    first_timestamp_ms: int = -1  # base timestamp of the first batch (when the first new data was made)
    next_offset: int = -1  # last offset of the last complete batch + 1
    max_timestamp_ms: int = -1
    log_append_time: bool = False  # timestamp type of the newest batch
    control_batches: int = 0
    partial_bytes: int = 0  # a partial last batch (normal in fetch responses)
    legacy: bool = False  # magic < 2: not scanned

    def __init__(self, size_bytes: int = 0, batches: int = 0, records: int = 0, first_offset: int = -1,
                 first_timestamp_ms: int = -1, next_offset: int = -1, max_timestamp_ms: int = -1,
                 log_append_time: bool = False, control_batches: int = 0, partial_bytes: int = 0,
                 legacy: bool = False) -> None:
        self.size_bytes = size_bytes
        self.batches = batches
        self.records = records
        self.first_offset = first_offset
        self.first_timestamp_ms = first_timestamp_ms
        self.next_offset = next_offset
        self.max_timestamp_ms = max_timestamp_ms
        self.log_append_time = log_append_time
        self.control_batches = control_batches
        self.partial_bytes = partial_bytes
        self.legacy = legacy


def batch_header(buf: Buf, p: int) -> tuple[int, int, int, int, int, int, int, int]:
    """The fields of the batch header at ``p`` that ``records`` reads (``BATCH_HEADER``'s). The
    compiled build returns them as a C struct of machine integers, and reads a ``bytes`` buffer
    in place with librt's readers: no tuple, no boxed int per field."""
    if NATIVE and isinstance(buf, bytes):
        return (read_i64_be(buf, p), read_i32_be(buf, p + 8), buf[p + 16], read_i16_be(buf, p + 21),
                read_i32_be(buf, p + 23), read_i64_be(buf, p + 27), read_i64_be(buf, p + 35), read_i32_be(buf, p + 57))
    header: tuple[int, int, int, int, int, int, int, int] = BATCH_HEADER.unpack_from(buf, p)
    return header


def records(r: Reader, flexible: bool) -> Parser[BatchStats | None]:
    """A partition's records: their batch headers walked, the batches passed over. Whole in the
    buffer (a frame parsed after it was forwarded, mostly), the native core walks them where it
    is loaded; otherwise ``walk``."""
    n = yield from length(r, flexible)
    if n < 0:
        return None
    if WALK is not None and len(r.buf) - r.pos >= n:
        return walk_native(r, n)
    return (yield from walk(r, n, WALK_WHOLE))


WALK_REMAINING_MAX: Final = 1 << 62  # what walk_whole_native hands the core of the records left


def walk_whole_native(whole: Callable[..., Any], r: Reader, remaining: int, stats: BatchStats) -> int:
    """The batches whole in ``r.buf`` from ``r.pos`` walked by the native core into ``stats``,
    merged as ``walk`` would have met them one by one; the records left."""
    # a records length read from a varint can pass what the core's usize holds (2**64); the core
    # compares it only with batches lying in the chunk, so any figure past the chunk reads alike
    got: tuple[int, int, int, int, int, int, int, bool, int] = whole(
        r.buf, r.pos, min(len(r.buf) - r.pos, remaining), min(remaining, WALK_REMAINING_MAX))
    passed, batches, recs, first_offset, first_ts, next_offset, max_ts, log_append, control = got
    if batches:
        r.pos += passed
        stats.batches += batches
        stats.records += recs
        if stats.first_offset < 0:  # walk's rule, batch by batch: taken while it is negative
            stats.first_offset = first_offset
            stats.first_timestamp_ms = first_ts
        stats.next_offset = next_offset
        if max_ts > stats.max_timestamp_ms:
            stats.max_timestamp_ms = max_ts
        stats.log_append_time = log_append
        stats.control_batches += control
        return remaining - passed
    return remaining


def walk_native(r: Reader, n: int) -> BatchStats:
    """The native core's walk of the ``n`` bytes of records at ``r.pos``, whole in ``r.buf``."""
    assert WALK is not None
    got: tuple[int, int, int, int, int, int, bool, int, int, bool] = WALK(r.buf, r.pos, n)
    batches, recs, first_offset, first_ts, next_offset, max_ts, log_append, control, partial, legacy = got
    r.pos += n
    return BatchStats(size_bytes=n, batches=batches, records=recs, first_offset=first_offset,
                      first_timestamp_ms=first_ts, next_offset=next_offset, max_timestamp_ms=max_ts,
                      log_append_time=log_append, control_batches=control, partial_bytes=partial, legacy=legacy)


def walk(r: Reader, n: int, whole: Callable[..., Any] | None = None) -> Parser[BatchStats]:
    """The batch headers of the ``n`` bytes of records at ``r.pos``: a tail shorter than a
    header, or a batch whose length runs past the records, is a partial last batch (the broker
    cuts at max bytes); a magic other than 2 stops the walk (``legacy``). With ``whole`` (the
    native core's ``walk_whole``), the batches lying whole in the current chunk are walked by
    it, and only a batch across two chunks (and the end of a walk) here."""
    stats = BatchStats(size_bytes=n)
    remaining = n
    while remaining > 0:
        if whole is not None and len(r.buf) - r.pos >= BATCH_HEADER_BYTES:
            remaining = walk_whole_native(whole, r, remaining, stats)
            if remaining == 0:
                break
        if remaining < BATCH_HEADER_BYTES:
            stats.partial_bytes += remaining
            yield from skip(r, remaining)
            break
        # A batch wholly in the chunk (most of them) is read and passed over in place: no
        # nested parser per batch, which is what a fetch of one-record batches pays per record.
        p = r.pos
        if len(r.buf) - p >= BATCH_HEADER_BYTES:
            r.pos = p + BATCH_HEADER_BYTES
        else:
            p = yield from need(r, BATCH_HEADER_BYTES)
        base, blen, magic, attrs, last_delta, base_ts, max_ts, count = batch_header(r.buf, p)
        if magic != 2:
            stats.legacy = True
            yield from skip(r, remaining - BATCH_HEADER_BYTES)
            break
        total = 12 + blen
        if blen < BATCH_HEADER_BYTES - 12 or total > remaining:
            stats.partial_bytes += remaining  # the broker cut the last batch short
            yield from skip(r, remaining - BATCH_HEADER_BYTES)
            break
        rest = total - BATCH_HEADER_BYTES
        if len(r.buf) - r.pos >= rest:
            r.pos += rest
        else:
            yield from skip(r, rest)
        remaining -= total
        stats.batches += 1
        if stats.first_offset < 0:
            stats.first_offset = base
            stats.first_timestamp_ms = base_ts
        stats.next_offset = base + last_delta + 1
        if attrs & CONTROL_BATCH:
            stats.control_batches += 1
        else:
            stats.records += count
        if max_ts > stats.max_timestamp_ms:
            stats.max_timestamp_ms = max_ts
        stats.log_append_time = bool(attrs & TIMESTAMP_TYPE_LOG_APPEND)
    return stats


class Twin:
    """One message version's streaming parser (made on demand) and its direct twin. Made once
    per version and kept (``requests.py``, ``responses.py``), so the Feeder of a frame allocates
    no closure, and no generator unless the frame arrives in pieces."""

    __slots__ = ("direct", "stream")

    def __init__(self, stream: Callable[[], Parser[Any]], direct: Callable[[Buf], Any]) -> None:
        self.stream = stream
        self.direct = direct


class Feeder:
    """Drives a parser generator over the chunks of one frame. Given a ``Twin`` (the parser and
    its non-suspending twin), a frame that arrives as one chunk is parsed by the twin instead:
    the first chunk waits, and only a second one makes and starts the generator. With
    ``collect`` too (the caller knows the frame is small), every chunk waits -- references,
    no copy -- and the twin parses them joined once the frame is complete."""

    __slots__ = ("_collect", "_direct", "_first", "_pieces", "_twin", "done", "error", "gen", "result")

    def __init__(self, source: Parser[Any] | Twin, collect: bool = False) -> None:
        self.result: Any = None
        self.done = False
        self.error: str | None = None
        self._first: Buf | None = None
        self._pieces: list[Buf] | None = None
        if isinstance(source, Twin):
            self._twin: Twin | None = source
            self.gen: Parser[Any] | None = None
            self._direct: Callable[[Buf], Any] | None = source.direct
            self._collect = collect
        else:
            self._twin = None
            self.gen = source
            self._direct = None
            self._collect = False
            self._start()

    def _start(self) -> None:
        gen = self.gen
        if gen is None:
            twin = self._twin
            if twin is None:
                raise RuntimeError("a Feeder has neither a parser nor a twin")
            gen = self.gen = twin.stream()
        try:
            next(gen)
        except StopIteration as stop:
            self.done, self.result = True, stop.value

    def _stopped(self) -> bool:
        """Parsed, or failed. A method, not an inline test: mypy narrows ``self.error`` to None
        after the first test and keeps it across the calls that set it, and the compiled build
        turns that narrowing into a run-time type check that fails."""
        return self.done or self.error is not None

    def feed(self, chunk: Buf) -> None:
        if self._stopped() or not len(chunk):
            return
        if self._direct is not None:
            if self._first is None:
                self._first = chunk
                return
            if self._collect:
                if self._pieces is None:
                    self._pieces = [self._first]
                self._pieces.append(chunk)
                return
            first, self._first, self._direct = self._first, None, None
            self._start()
            self._send(first)
            if self._stopped():
                return
        self._send(chunk)

    def _send(self, chunk: Buf) -> None:
        gen = self.gen
        if gen is None:
            raise RuntimeError("a Feeder sent a chunk before its parser started")
        try:
            gen.send(chunk)
        except StopIteration as stop:
            self.done, self.result = True, stop.value
        except DecodeError as exc:
            self.error = str(exc)
        except (struct.error, ValueError, IndexError) as err:  # a name of its own: mypyc types one by its first use
            self.error = f"{type(err).__name__}: {err}"

    def finish(self) -> Any:
        """The result, or None (with ``error`` set) when the frame ended early or was bad."""
        if self._direct is not None:
            direct, self._direct = self._direct, None
            whole = b"".join(self._pieces) if self._pieces is not None else self._first
            result, error = run_direct(direct, whole if whole is not None else b"")
            if error is None:
                self.result, self.done = result, True
            else:
                self.error = error
            self._first = self._pieces = None
        if not self.done and self.error is None:
            self.error = ENDED_EARLY
            gen = self.gen
            if gen is not None:
                gen.close()
        return self.result if self.done else None


ENDED_EARLY: Final = "frame ended before the message did"


# A whole message up to this size is read from a copy of its bytes in the compiled build: librt's
# readers take a field of a ``bytes`` in a few instructions, where a struct unpack from a
# memoryview costs ~1 100 (a Fetch request's dozen fields: more than the copy).
COPY_TO_READ_BYTES: Final = 16 << 10


def run_direct(direct: Callable[[Buf], Any], whole: Buf) -> tuple[Any, str | None]:
    """A direct twin over a whole message: (result, None), or (None, why it failed)."""
    if NATIVE and not isinstance(whole, bytes) and len(whole) <= COPY_TO_READ_BYTES:
        whole = bytes(whole)
    try:
        return direct(whole), None
    except DecodeError as exc:
        return None, str(exc)
    except (struct.error, ValueError, IndexError) as err:  # a name of its own: mypyc types one by its first use
        return None, f"{type(err).__name__}: {err}"


# ---------------------------------------------------------------- direct twins
# A parser above suspends only in ``need`` and ``skip``. For a frame that is whole in one
# buffer, the same source with every ``yield from f(`` read as ``f_now(`` is a plain function
# (no generator per field). ``gen_direct.py`` writes those twins out at build time
# (``stream_now.py``, ``fetch_now.py``, ``produce_now.py``, checked in); these three are what
# they suspend in, written by hand.

def need_now(r: Reader, n: int) -> int:
    p = r.pos
    if len(r.buf) - p < n:
        raise DecodeError(ENDED_EARLY)
    r.pos = p + n
    return p


def skip_now(r: Reader, n: int) -> None:
    need_now(r, n)


def uvarint_now(r: Reader) -> int:
    v = uvarint_here(r)
    if v is None:
        raise DecodeError(ENDED_EARLY)
    return v


def parse_whole(gen: Parser[T], data: Buf) -> T:
    """Run a parser over one complete buffer (tests, and small frames)."""
    f = Feeder(gen)
    f.feed(data)
    result = f.finish()
    if f.error is not None:
        raise DecodeError(f.error)
    return result  # type: ignore[no-any-return]

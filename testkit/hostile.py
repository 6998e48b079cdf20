"""Hostile Produce requests, as one client of a sidecar whose connections the native relay
carries might send them (``bench/hostile_relay.py``, ``tests/integration/test_relayed.py``): a
well-formed one of one-record batches (the baseline), and ones whose counts claim more than the
frame holds or whose tags fill it. Each is a whole frame of about ``size`` bytes."""

from __future__ import annotations

import struct
from collections.abc import Callable

from fetchlat.protocol import apis
from fetchlat.protocol.primitives import encode_uvarint as uvarint


def batch(base: int, size: int) -> bytes:
    """A record batch header (magic 2) of one record, the batch ``size`` bytes in all."""
    b = bytearray(size)
    struct.pack_into(">qi", b, 0, base, size - 12)
    b[16] = 2
    struct.pack_into(">i", b, 57, 1)
    return bytes(b)


def produce_head(topics: int = 1, partitions: int = 1) -> bytes:
    """A Produce v9 body (no transactional id, acks 1) up to its first partition's records."""
    return (uvarint(0) + struct.pack(">hi", 1, 30_000) + uvarint(topics + 1) + uvarint(2) + b"t"
            + uvarint(partitions + 1) + struct.pack(">i", 0))


def produce_frame(body: bytes) -> bytes:
    header = struct.pack(">hhi", apis.PRODUCE, 9, 2) + struct.pack(">h", 13) + b"hostile-bench" + b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def well_formed(size: int) -> bytes:
    records = b"".join(batch(i, 1000) for i in range(size // 1000))
    return produce_frame(produce_head() + uvarint(len(records) + 1) + records + b"\x00\x00\x00")


def padded(head: bytes, size: int) -> bytes:
    return produce_frame(head + bytes(max(0, size - len(head))))


STREAMS: dict[str, Callable[[int], bytes]] = {
    "well-formed": well_formed,
    "partition tags 2^32-1": lambda n: padded(produce_head() + uvarint(1) + uvarint((1 << 32) - 1), n),
    "topics 2^31-1": lambda n: padded(uvarint(0) + struct.pack(">hi", 1, 30_000) + uvarint(1 << 31), n),
    "partitions 2^31-1": lambda n: padded(uvarint(0) + struct.pack(">hi", 1, 30_000) + uvarint(2) + uvarint(2)
                                          + b"t" + uvarint(1 << 31), n),
    "partition tags that fit": lambda n: padded(produce_head() + uvarint(1) + uvarint(n // 2 - 64), n),
}

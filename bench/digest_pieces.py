"""The native digest's cost per byte, the same bytes fed whole, in 64 KiB reads and in 1 KiB
reads: a Fetch answer of one-record batches (well formed), and hostile ones (a header claiming
2^32-1 tags; one claiming as many tags as can fit, each two bytes; a partition's aborted
transactions at the cap). The relay feeds the digest one read at a time (``native/src/digest.rs``),
so a cost that grew with the pieces would let one upload stall every connection the relay carries.

    .venv/bin/python bench/digest_pieces.py [--mb 8] [--repeat 3]

Prints ns per byte for each body and piece size (the best of ``--repeat``), and the ratio of the
pieces' cost to the whole's.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat import native
from fetchlat.protocol.primitives import encode_uvarint as uvarint

from testkit.hostile import batch


def well_formed(size: int) -> bytes:
    """A Fetch v12 body (after the correlation id): one topic, one partition, one-record batches."""
    records = b"".join(batch(i, 100) for i in range(size // 100))
    b = bytearray(b"\x00")  # header tags
    b += struct.pack(">ihi", 0, 0, 1) + uvarint(2) + uvarint(2) + b"t" + uvarint(2)
    b += struct.pack(">ihqqq", 0, 0, 1, 1, 0) + uvarint(1) + struct.pack(">i", -1)
    b += uvarint(len(records) + 1) + records + b"\x00\x00\x00"
    return bytes(b)


def tag_count(size: int, count: int) -> bytes:
    return uvarint(count) + bytes(size - len(uvarint(count)))


def aborted(size: int) -> bytes:
    b = bytearray(b"\x00") + struct.pack(">ihi", 0, 0, 1) + uvarint(2) + uvarint(2) + b"t" + uvarint(2)
    b += struct.pack(">ihqqq", 0, 0, 1, 1, 0) + uvarint((1 << 24) + 1)
    return bytes(b) + bytes(size - len(b))


def cost(core: object, body: bytes, piece: int, repeat: int) -> float:
    cuts = list(range(piece, len(body), piece))
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter_ns()
        core.digest_fetch(body, 12, cuts, False)  # type: ignore[attr-defined]
        best = min(best, time.perf_counter_ns() - t)
    return best / len(body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    core = native.core()
    if core is None:
        print(f"native core not loaded: {native.reason()}", file=sys.stderr)
        return 1
    size = args.mb << 20
    bodies = {
        "well formed (1-record batches)": well_formed(size),
        "header claims 2^32-1 tags": tag_count(size, (1 << 32) - 1),
        "header claims size/2 tags (fit)": tag_count(size, size // 2 - 8),
        "2^24 aborted transactions": aborted(size),
    }
    print(f"{'body':34} {'whole ns/B':>11} {'64 KiB':>8} {'1 KiB':>8} {'64K/whole':>10} {'1K/whole':>9}")
    for name, body in bodies.items():
        whole = cost(core, body, len(body), args.repeat)
        k64 = cost(core, body, 64 << 10, args.repeat)
        k1 = cost(core, body, 1 << 10, args.repeat)
        ratios = f"{k64 / max(whole, 1e-9):10.2f} {k1 / max(whole, 1e-9):9.2f}"
        print(f"{name:34} {whole:11.3f} {k64:8.3f} {k1:8.3f} {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The record batch walk per batch, in-process: a 1 MiB Fetch response (v12) of one-record
batches parsed whole (the direct parser, as a response read in one piece is after its write)
and fed in 64 KiB and 256 KiB pieces (the streaming parser, as a large response arrives), with
the native core (``native/``: ``walk_batches``, ``walk_whole``) and without it (the compiled
build, ``FETCHLAT_NATIVE=0``), in one run. The pieces are sliced ahead of the timing.

    python bench/batch_walk.py [--sizes 80,1100] [--trials 7]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEADER = struct.Struct(">qiiBIhiqqqhii")


def uvarint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def response_body(batches: int, size: int) -> bytes:
    """A Fetch v12 response after its correlation id: one topic, one partition, the records."""
    blob = b"".join(HEADER.pack(i, size - 12, 0, 2, 0, 0, 0, 1000, 1000, -1, -1, -1, 1) + bytes(size - 61)
                    for i in range(batches))
    body = b"\x00" + struct.pack(">ihi", 0, 0, 0) + uvarint(2) + uvarint(2) + b"t" + uvarint(2)
    body += struct.pack(">ihqqq", 0, 0, batches, batches, 0) + uvarint(0) + struct.pack(">i", -1)
    return body + uvarint(len(blob) + 1) + blob + b"\x00" + b"\x00" + b"\x00"


def measure(sizes: list[int], trials: int) -> dict[str, float]:
    from fetchlat.protocol import apis
    from fetchlat.protocol.responses import _twin
    from fetchlat.protocol.stream import Feeder

    twin = _twin(apis.FETCH, 12, None)
    out: dict[str, float] = {}
    for size in sizes:
        n = (1 << 20) // size
        body = response_body(n, size)
        assert twin.direct(body).partitions[0].batches.batches == n
        best = min(_timed(lambda body=body: twin.direct(body)) for _ in range(trials))
        out[f"{size} B batches, whole"] = best / n
        for piece in (64 << 10, 256 << 10):
            pieces = [body[i:i + piece] for i in range(0, len(body), piece)]

            def fed(pieces: list[bytes] = pieces, n: int = n) -> None:
                f = Feeder(twin)
                for p in pieces:
                    f.feed(p)
                assert f.finish().partitions[0].batches.batches == n

            out[f"{size} B batches, in {piece >> 10} KiB pieces"] = min(_timed(fed) for _ in range(trials)) / n
    return out


def _timed(fn: object) -> int:
    t = time.perf_counter_ns()
    fn()  # type: ignore[operator]
    return time.perf_counter_ns() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="80,1100")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        from fetchlat.proxy.build import hot_path

        print(json.dumps({"hot_path": hot_path(), **measure(sizes, args.trials)}))
        return 0
    runs = {}
    for name, env in (("native", {}), ("compiled", {"FETCHLAT_NATIVE": "0"})):
        r = subprocess.run([sys.executable, __file__, "--child", "--sizes", args.sizes, "--trials", str(args.trials)],
                           env={**os.environ, **env}, capture_output=True, text=True, check=True)
        runs[name] = json.loads(r.stdout)
    print(f"ns per batch (best of {args.trials}): native ({runs['native'].pop('hot_path')}) | compiled, "
          f"no core ({runs['compiled'].pop('hot_path')}) | ratio")
    for k, v in runs["native"].items():
        c = runs["compiled"][k]
        print(f"  {k:34s} {v:7.1f} | {c:7.1f} | {c / v:5.1f}x   ({v * 1e9 / int(k.split()[0]) / 1e9:.3f} | "
              f"{c * 1e9 / int(k.split()[0]) / 1e9:.3f} CPU-s per GB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

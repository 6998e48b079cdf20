"""One stamped read of a broker socket, alone: the Python road (``recvmsg_into`` and the
ancillary data, ``proxy/stamps.py``) against the native core (``native/src/lib.rs``), beside a
plain ``recv``. Each iteration sends 100 bytes over loopback TCP and reads them back; the send
is common to all three, so the differences are the reads'. Best of 5 runs of N iterations
(a tight loop on one core: the minimum is what the code costs, the rest is the machine).

    python bench/stamp_read.py [--reads 50000]
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat import native
from fetchlat.proxy import stamps
from fetchlat.proxy.stamps import SO_TIMESTAMPNS, StampCounts, StampedReader


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=50_000)
    args = ap.parse_args()
    recv = stamps._NATIVE_RECV
    if recv is None:
        print(f"no native core: {native.reason()}")
        return 1
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    b.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    b.setblocking(False)
    keeper = stamps.keep_stamping_on()
    counts = StampCounts()
    reader = StampedReader(None, b, counts, lambda d, t: None, lambda: None, lambda e: None)  # type: ignore[arg-type]
    msg = b"x" * 100

    def best(read: Callable[[], object]) -> float:
        out = float("inf")
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(args.reads):
                a.send(msg)
                read()
            out = min(out, (time.perf_counter_ns() - t0) / args.reads)
        return out

    plain = best(lambda: b.recv(1000))
    python = best(reader._readable_python)
    nat = best(lambda: reader._readable_native(recv))
    print(f"send + plain recv:          {plain:7.0f} ns")
    print(f"send + stamped, Python road: {python:6.0f} ns  (+{python - plain:.0f} ns over a plain recv)")
    print(f"send + stamped, native core: {nat:6.0f} ns  (+{nat - plain:.0f} ns over a plain recv)")
    print(f"the native core saves {python - nat:.0f} ns per read; kernel-stamped reads: {counts.kernel} of "
          f"{counts.kernel + counts.clock}")
    a.close()
    b.close()
    if keeper is not None:
        keeper.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

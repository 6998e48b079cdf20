"""How many requests one core of the proxy carries, per API: ``--connections`` connections
(one request in flight each, unpaced) of one request type through each path for
``--seconds``; the proxy's CPU seconds over the requests answered gives its CPU per request,
and 1 / that is the request rate at 100 % of a core. The load generator (Python, its own
process) is usually the bottleneck on this 2-core machine, so the figure is per CPU-second of
the proxy, not the peak the machine reached. Each path gets a fresh Tansu; paths alternate.

    python bench/request_rate.py   # fetchlat's two roads (traces off and on), fetchlat-py, relay, haproxy; 3 trials
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame

from bench.bench_proxy import (
    NODE,
    RELAYED,
    RELAYED_TRACED,
    TRACED_KINDS,
    create_topics,
    drained_cpu,
    target,
    trace_rows,
    writer_cpu_s,
)
from bench.kafka_client import fetch_request
from bench.procs import cpu_s
from testkit.frames import record_batch

PATHS = (RELAYED, RELAYED_TRACED, "fetchlat", "fetchlat+traces", "fetchlat-py", "relay", "haproxy")
MIXES = ("ApiVersions", "Metadata", "Fetch(max_wait 0)", "Produce(1 record)")


def frame(mix: str, topic: str) -> bytes:
    def enc(key: int, v: int, value: dict[str, object]) -> bytes:
        return request_frame(key, v, 1, "rate", encode(apis.table()[key].request(), v, value))

    if mix == "ApiVersions":
        return enc(apis.API_VERSIONS, 3, {"ClientSoftwareName": "r", "ClientSoftwareVersion": "1"})
    if mix == "Metadata":
        return enc(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}],
                                       "AllowAutoTopicCreation": False})
    if mix == "Fetch(max_wait 0)":
        return enc(apis.FETCH, 12, fetch_request(topic, uuid.UUID(int=0), 0, 0))
    return enc(apis.PRODUCE, 9, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 5000, "TopicData": [
        {"Name": topic, "PartitionData": [{"Index": 0, "Records": record_batch()}]}]})


async def drive(port: int, data: bytes, connections: int, seconds: float) -> int:
    done = 0
    deadline = time.monotonic() + seconds

    async def one() -> None:
        nonlocal done
        r, w = await asyncio.open_connection("127.0.0.1", port)
        while time.monotonic() < deadline:
            w.write(data)
            size = struct.unpack(">i", await r.readexactly(4))[0]
            await r.readexactly(size)
            done += 1
        w.close()

    await asyncio.gather(*(one() for _ in range(connections)))
    return done


def measure(path: str, a: argparse.Namespace, work: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    with target(path, work) as (port, pid, _):
        topic = f"rate-{uuid.uuid4().hex[:6]}"
        create_topics(f"127.0.0.1:{port}", topic)
        # the event loop's road routes by the broker's listener; the relay road's sidecar is the listener
        port = port + 1 + NODE if path.startswith("fetchlat") and path not in (RELAYED, RELAYED_TRACED) else port
        assert pid is not None
        for mix in MIXES:
            data = frame(mix, topic)
            asyncio.run(drive(port, data, 4, 0.3))  # warm: children, caches
            c0, t0 = cpu_s(pid), time.monotonic()
            n = asyncio.run(drive(port, data, a.connections, a.seconds))
            wall = time.monotonic() - t0
            cpu = drained_cpu(pid) - c0  # the relay road's last items, drained at the proxy's tick
            if path in TRACED_KINDS:
                # the phase's last rows are written once their batch's first has waited the hold
                # (30 s): the writer thread's CPU until they are on disk is the phase's too
                w = writer_cpu_s(pid)
                out["trace rows written"], out["trace rows dropped"] = trace_rows(pid)
                cpu += writer_cpu_s(pid) - w
            out[f"{mix} requests/s"] = round(n / wall)
            out[f"{mix} proxy cores"] = round(cpu / wall, 2)
            out[f"{mix} requests per proxy cpu-s"] = round(n / cpu) if cpu > 0 else float("nan")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--out")
    a = ap.parse_args()
    import uvloop

    uvloop.install()
    work = Path(tempfile.mkdtemp(prefix="fetchlat-rate-"))
    paths = a.paths.split(",")
    raw: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    for trial in range(a.trials):
        order = paths[trial % len(paths):] + paths[:trial % len(paths)]
        for p in order:
            raw[p].append(measure(p, a, work))
            print(f"trial {trial + 1}/{a.trials} {p} done", file=sys.stderr, flush=True)
    keys = list(dict.fromkeys(k for p in paths for r in raw[p] for k in r))
    print(f"{'median of ' + str(a.trials) + ' trials':44}" + "".join(f"{p:>16}" for p in paths))
    for k in keys:
        print(f"{k:44}" + "".join(f"{statistics.median(r[k] for r in raw[p]):>16,.2f}" if k in raw[p][0]
                                  else f"{'-':>16}" for p in paths))
    if a.out:
        Path(a.out).write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

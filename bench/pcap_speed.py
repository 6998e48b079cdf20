"""How fast ``fetchlat pcap`` reads a capture, against ``tshark`` decoding Kafka in the same file,
and the capture readers it could be built on.

Two captures are made first with ``tcpdump -i lo -s 0`` of a fresh Tansu's port: ``bulk``
(librdkafka producing ``--mb`` MB in big batches, then consuming it back: few, large packets,
loopback's MTU being 64 KiB) and ``small`` (32 connections of one-at-a-time Fetch, Produce,
Metadata and ApiVersions requests: many small packets). A third, ``bulk-mtu1500``, is ``bulk``
cut into the 1448-byte segments a NIC with a 1500-byte MTU would carry. Then, per capture,
each reader runs alone on one core and its CPU seconds are turned into MB/s and packets/s of
capture:

- ``fetchlat pcap`` (reassembly, the proxy's codec and latency model, no trace files), from
  the file and from a pipe (``-``: read a packet at a time, as from ``tcpdump -U -w -``);
- ``tshark -r FILE -d tcp.port==PORT,kafka -T fields -e kafka.correlation_id`` (Wireshark's Kafka
  dissector: the request-to-response tool a user would reach for);
- the capture readers alone, every packet's bytes in Python: libpcap through pcapy-ng (what
  fetchlat uses, in batches of 64) and dpkt (pure Python).

    python bench/pcap_speed.py [--mb 300] [--keep DIR]   # --keep: kept, and reused by the next run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import create_topics, target
from bench.request_rate import MIXES, drive, frame

HERE = Path(__file__).parent


def capture(port: int, out: Path, work: Callable[[], None]) -> None:
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "0", "-n", "-B", "65536", "-w", str(out),
                             f"tcp port {port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert dump.stderr is not None
    dump.stderr.readline()  # "listening on lo"
    try:
        work()
    finally:
        time.sleep(0.5)
        dump.send_signal(signal.SIGINT)
        err = dump.communicate(timeout=30)[1].decode()
    dropped = [ln for ln in err.splitlines() if "dropped by kernel" in ln]
    print(f"  {out.name}: {out.stat().st_size / 1e6:.0f} MB; tcpdump: {'; '.join(dropped)}", flush=True)


def rdkafka(*args: str) -> None:
    subprocess.run([sys.executable, str(HERE / "rdkafka_client.py"), *args], check=True, capture_output=True,
                   timeout=600)


def make_captures(work: Path, mb: int) -> tuple[dict[str, Path], int]:
    paths = {"bulk": work / "bulk.pcap", "small": work / "small.pcap"}
    with target("direct", work) as (port, _, _):
        topic = f"speed-{uuid.uuid4().hex[:6]}"
        create_topics(f"127.0.0.1:{port}", topic)
        n = mb * 1000 // 2  # 1 KiB records: half produced, the same read back

        def bulk() -> None:
            rdkafka("produce", f"127.0.0.1:{port}", topic, str(n))
            rdkafka("consume", f"127.0.0.1:{port}", topic, str(n))

        def small() -> None:
            for mix in MIXES:
                asyncio.run(drive(port, frame(mix, topic), 32, 3.0))

        capture(port, paths["bulk"], bulk)
        capture(port, paths["small"], small)
        (work / "port").write_text(str(port))
        return paths, port


def resegment(src: Path, dst: Path, mss: int = 1448) -> None:
    """``src`` as a NIC with a 1500-byte MTU would have carried it: every TCP payload cut into
    ``mss``-byte segments (loopback's 64 KiB MTU makes a few huge packets), same timestamps."""
    from fetchlat.capture.packets import FIN, Segment, tcp_segment
    from fetchlat.capture.source import Capture

    from testkit.pcap_files import ipv4_tcp, write_pcap

    def frames() -> Iterator[tuple[int, bytes]]:
        cap = Capture(str(src))
        for buf, packets in cap.batches():
            view = memoryview(buf)
            for t_ns, off, n in packets:
                seg = tcp_segment(cap.linktype, view[off : off + n])
                if not isinstance(seg, Segment):
                    continue
                payload = bytes(seg.payload)
                pieces = [payload[i : i + mss] for i in range(0, len(payload), mss)] or [b""]
                for i, piece in enumerate(pieces):
                    flags = seg.flags if i == len(pieces) - 1 else seg.flags & ~FIN
                    yield t_ns, ipv4_tcp(seg.src, seg.dst, seg.seq + i * mss, flags, piece)

    write_pcap(dst, frames())


def child_cpu(cmd: list[str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one command run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {r.stderr[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, r.stdout


READ_PCAPY = """
import sys, pcapy
r = pcapy.open_offline(sys.argv[1]); n = b = 0
while True:
    data, meta = r.next_batch(64)
    if not meta: break
    n += len(meta) // 16; b += len(data)
print(n, b)
"""
READ_DPKT = """
import sys, dpkt
f = open(sys.argv[1], 'rb'); n = b = 0
for ts, buf in dpkt.pcap.UniversalReader(f):
    n += 1; b += len(buf)
print(n, b)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=300, help="MB of records produced and consumed for the bulk capture")
    ap.add_argument("--keep", help="keep the captures in this directory")
    a = ap.parse_args()
    work = Path(a.keep or tempfile.mkdtemp(prefix="fetchlat-pcap-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.keep and (work / "port").exists():  # captures kept by an earlier run: reused
        paths, port = {"bulk": work / "bulk.pcap", "small": work / "small.pcap"}, int((work / "port").read_text())
    else:
        print("making the captures", flush=True)
        paths, port = make_captures(work, a.mb)
    paths["bulk-mtu1500"] = work / "bulk-mtu1500.pcap"
    if not paths["bulk-mtu1500"].exists():
        resegment(paths["bulk"], paths["bulk-mtu1500"])
    results = []
    for name, path in paths.items():
        size = path.stat().st_size
        packets = int(child_cpu([sys.executable, "-c", READ_PCAPY, str(path)])[2].split()[0])
        runs = {
            "fetchlat pcap": [sys.executable, "-m", "fetchlat.app", "pcap", str(path), "--broker-port", str(port),
                              "--quiet"],
            "fetchlat pcap - (a pipe, as live)": ["sh", "-c", f"{sys.executable} -m fetchlat.app pcap - "
                                                  f"--broker-port {port} --quiet < {path}"],
            "tshark (Kafka dissector)": ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields",
                                         "-e", "kafka.correlation_id"],
            "reader only: pcapy-ng (libpcap, batches)": [sys.executable, "-c", READ_PCAPY, str(path)],
            "reader only: dpkt": [sys.executable, "-c", READ_DPKT, str(path)],
        }
        for label, cmd in runs.items():
            cpu, wall, out = child_cpu(cmd)
            row = {"capture": name, "reader": label, "mb": round(size / 1e6, 1), "packets": packets,
                   "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "mb_per_cpu_s": round(size / 1e6 / cpu, 1),
                   "packets_per_cpu_s": round(packets / cpu)}
            if label == "fetchlat pcap":
                row["summary"] = out.splitlines()[0][:200] if out else ""
            results.append(row)
            print(f"  {name:12s} {label:42s} {row['mb_per_cpu_s']:8.1f} MB/s {row['packets_per_cpu_s']:10,d} packets/s "
                  f"per core ({cpu:.2f} CPU-s, {wall:.2f} s wall)", flush=True)
    print(json.dumps(results))
    if not a.keep:
        for p in paths.values():
            os.unlink(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Hostile uploads through a sidecar whose connections the native relay carries, while an
unrelated client does ApiVersions round trips on its own connection (also relayed) and is
timed: what one client's bytes cost every other connection. Each upload is a Produce v9 request
of ``--mb`` MiB sent in 64 KiB writes, after the connection's first exchange (so the relay
carries it): well formed (one-record batches: the baseline), or whose counts claim more than
the frame holds (a partition's tags 2^32-1, topics 2^31-1, partitions 2^31-1), or whose tags
fit (a partition's tag buffer of as many two-byte tags as the frame holds); then a slow trickle
(2 bytes every 250 ms on a connection mid-upload). Real Tansu, the real proxy. With ``--tls``
the sidecar has a TLS certificate and every connection (the probe's, the uploads') speaks TLS:
the relay's thread then holds each client's TLS session from its first byte and decrypts the
uploads before it frames them.

    .venv/bin/python bench/hostile_relay.py [--mb 32] [--rounds 2] [--tls] [--out hostile.json]

Per stream, the medians over ``--rounds`` interleaved rounds: the unrelated client's p50, p99
and max round trip during the stream's ``--uploads`` back-to-back uploads (and idle, before
any), the relay thread's CPU per MiB uploaded and over the well-formed upload's, the proxy's
RSS growth, and how the hostile connection ended.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame

from bench.procs import TANSU_NODE_ID, broker_and_proxy, rss_mb, thread_cpu_s
from testkit.certs import make_certs
from testkit.hostile import STREAMS

WRITE = 64 << 10
PROBE_EVERY_S = 0.005
RELAY_THREAD = "fetchlat-relay"


def api_versions_frame(corr: int) -> bytes:
    body = encode(apis.table()[apis.API_VERSIONS].request(), 3,
                  {"ClientSoftwareName": "hostile-bench", "ClientSoftwareVersion": "1"})
    return request_frame(apis.API_VERSIONS, 3, corr, "hostile-bench", body)


def read_answer(s: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        got = bytearray()
        while len(got) < n:
            chunk = s.recv(n - len(got))
            if not chunk:
                raise ConnectionError("closed")
            got += chunk
        return bytes(got)

    return exactly(struct.unpack(">i", exactly(4))[0])


def connected(port: int, tls: ssl.SSLContext | None) -> socket.socket:
    """A connection whose first exchange is done (over TLS with ``tls``): the relay carries it from here."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is not None:
        s = tls.wrap_socket(s, server_hostname="localhost")
    s.sendall(api_versions_frame(1))
    read_answer(s)
    return s


class Probe(threading.Thread):
    """ApiVersions round trips on one relayed connection, each timed, every 5 ms."""

    def __init__(self, port: int, tls: ssl.SSLContext | None) -> None:
        super().__init__(daemon=True)
        self.sock = connected(port, tls)
        self.times: list[tuple[float, float]] = []  # (when, seconds)
        self.stop = threading.Event()
        self.errors = 0

    def run(self) -> None:
        corr = 10
        frames = [api_versions_frame(c) for c in range(corr, corr + 100)]
        i = 0
        while not self.stop.is_set():
            t = time.perf_counter()
            try:
                self.sock.sendall(frames[i % 100])
                read_answer(self.sock)
            except OSError:
                self.errors += 1
                return
            self.times.append((t, time.perf_counter() - t))
            i += 1
            time.sleep(PROBE_EVERY_S)

    def between(self, a: float, b: float) -> list[float]:
        return [d for t, d in self.times if a <= t <= b]


def relay_cpu(pid: int) -> float:
    return sum(c for name, c in thread_cpu_s(pid) if name == RELAY_THREAD)


def upload(port: int, frame: bytes, trickle_s: float, tls: ssl.SSLContext | None) -> str:
    """Sends ``frame`` in 64 KiB writes (a trickle of 2 bytes every 250 ms for ``trickle_s``
    after the first half, on the same connection), then reads: how the connection ended."""
    s = connected(port, tls)
    s.settimeout(30)
    try:
        half = len(frame) // 2 // WRITE * WRITE
        for at in range(0, len(frame), WRITE):
            if trickle_s and at == half:
                end = time.monotonic() + trickle_s
                for k in range(at, len(frame), 2):
                    if time.monotonic() >= end:
                        break
                    s.sendall(frame[k:k + 2])
                    time.sleep(0.25)
                return "trickled"
            s.sendall(frame[at:at + WRITE])
        try:
            read_answer(s)
            return "answered"
        except (ConnectionError, OSError) as e:
            return f"closed ({type(e).__name__})"
    except OSError as e:
        return f"closed while sending ({type(e).__name__})"
    finally:
        s.close()


def quantile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--uploads", type=int, default=5, help="uploads of each stream a round, back to back")
    ap.add_argument("--trickle-s", type=float, default=5.0)
    ap.add_argument("--tls", action="store_true", help="every connection speaks TLS to the sidecar")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    size = args.mb << 20
    frames = {name: make(size) for name, make in STREAMS.items()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in [*frames, "trickle", "idle"]}
    with tempfile.TemporaryDirectory() as tmp:
        tls_args: list[str] = []
        tls = None
        if args.tls:
            certs = make_certs(Path(tmp) / "certs")
            tls_args = ["--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key)]
            tls = ssl.create_default_context(cafile=str(certs.ca))
        with broker_and_proxy(Path(tmp), "--sidecar-node", str(TANSU_NODE_ID), "--relay", "native",
                              "--log-level", "WARNING", *tls_args) as run:
            errors, metrics = measure(run, args, frames, runs, tls)
    report(args, runs, errors, metrics)
    return 0


def measure(run: Any, args: argparse.Namespace, frames: dict[str, bytes], runs: dict[str, list[dict[str, Any]]],
            tls: ssl.SSLContext | None) -> tuple[int, str]:
    """The rounds, into ``runs``: the probe's errors, and the proxy's metrics at the end."""
    port = run.proxy_port
    probe = Probe(port, tls)
    probe.start()
    time.sleep(1.0)
    rss0 = rss_mb(run.proxy_pid)
    for _ in range(args.rounds):
        a = time.perf_counter()
        time.sleep(2.0)
        lat = probe.between(a, time.perf_counter())
        runs["idle"].append({"p50_ms": quantile(lat, 0.5) * 1e3, "p99_ms": quantile(lat, 0.99) * 1e3,
                             "max_ms": max(lat) * 1e3})
        for name in [*frames, "trickle"]:
            frame = frames.get(name, frames["partition tags 2^32-1"])
            trickle = name == "trickle"
            n = 1 if trickle else args.uploads
            cpu0, a = relay_cpu(run.proxy_pid), time.perf_counter()
            ended = ", ".join(sorted({upload(port, frame, args.trickle_s if trickle else 0.0, tls)
                                      for _ in range(n)}))
            b = time.perf_counter()
            time.sleep(0.3)
            cpu = (relay_cpu(run.proxy_pid) - cpu0) / n
            lat = probe.between(a, b)
            runs[name].append({"ended": ended, "p50_ms": quantile(lat, 0.5) * 1e3,
                               "p99_ms": quantile(lat, 0.99) * 1e3, "max_ms": max(lat, default=0) * 1e3,
                               "relay_cpu_ms": cpu * 1e3, "relay_cpu_ms_per_mib": cpu * 1e3 / args.mb,
                               "rss_mb": rss_mb(run.proxy_pid) - rss0})
    probe.stop.set()
    probe.join(5)
    return probe.errors, str(run.metrics_text())


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]], errors: int, metrics: str) -> None:
    base = statistics.median(r["relay_cpu_ms_per_mib"] for r in runs["well-formed"])
    over = " over TLS" if args.tls else ""
    print(f"{args.mb} MiB uploads{over} in 64 KiB writes, {args.rounds} rounds (medians); probe errors: {errors}")
    print(f"{'stream':26} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'relay ms/MiB':>12} {'x well-formed':>13} "
          f"{'RSS +MB':>8}  ended")
    out: dict[str, Any] = {"mb": args.mb, "rounds": args.rounds, "tls": args.tls, "probe_errors": errors,
                           "streams": {}}
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "ended"}
        med["ended"] = sorted({r["ended"] for r in rs if "ended" in r})
        out["streams"][name] = med
        cpu = med.get("relay_cpu_ms_per_mib")
        ratio = "" if cpu is None or name == "trickle" else f"{cpu / base:.2f}"
        cpu_s = "" if cpu is None else f"{cpu:.2f}"
        rss = "" if "rss_mb" not in med else f"{med['rss_mb']:.1f}"
        print(f"{name:26} {med['p50_ms']:7.2f} {med['p99_ms']:7.2f} {med['max_ms']:7.2f} {cpu_s:>12} {ratio:>13} "
              f"{rss:>8}  {', '.join(med['ended'])}")
    errs = [line for line in metrics.splitlines() if line.startswith("fetchlat_connection_errors_total")]
    print("\n".join(errs))
    out["connection_errors"] = errs
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())

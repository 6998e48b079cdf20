"""What consuming one-record batches costs the proxy, per GB, with and without the native core:
librdkafka (``bench/rdkafka_client.py``, no Python per record) produces records of each size
one per request through the path, then consumes them back; the proxy's CPU during the consume,
per GB of record values. Paths, in rotating order per trial, each to a fresh Tansu: the relay
(``bench/relay.py``, zero decoding: the floor for a proxy built the way fetchlat is), haproxy,
fetchlat on the event loop's road (``fetchlat``, relay off), the same with traces on as deployed
(``fetchlat+traces``: a row per request), fetchlat without its native core
(``FETCHLAT_NATIVE=0``), and fetchlat as a sidecar with ``relay: native``, its connections carried
by the native core's relay (``fetchlat-relay``, ``fetchlat-relay+traces``); over TLS to the clients,
haproxy terminating TLS itself (``haproxy-tls``, the TLS paths' baseline, run whenever one is asked
for) and the traced sidecar with ``--tls-cert``, its clients' sessions the native core's
(``fetchlat-relay-tls+traces``); and a central proxy on the relay (``fetchlat-relay-central+traces``:
a proxy away from its broker, which rewrites the broker's addresses; ``fetchlat+traces`` is the same
on the event loop's road). Each figure comes twice:
all the proxy's CPU during the consume, and that less what it spends idle for as long (measured
for five seconds just before: timers, heartbeats, calibration), which the relay and haproxy do not
spend and which a consume of a few seconds would otherwise count per GB. With traces, the
produce's rows are on disk before anything is measured. The proxy holds rows until the first of
a batch has waited 30 s (``proxy/traces.py``'s hold) before they are written: the consume's
count adds its writer thread's CPU (``fetchlat-traces``) until the consume's own rows are on disk.

    python bench/consume_small.py [--trials 3] [--sizes 100,1024] [--mb 10] [--paths relay,haproxy,...]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.proxy.heartbeat import TICK_S
from fetchlat.proxy.traces import HOLD_NS as TRACE_HOLD_NS

from bench.bench_proxy import (
    CENTRAL_TRACED,
    DRAINED_S,
    HAPROXY_TLS,
    METRICS_PORTS,
    NO_CORE,
    RELAYED,
    RELAYED_TLS_TRACED,
    RELAYED_TRACED,
    TLS_KINDS,
    TRACE_THREAD,
    TRACED,
    TRACED_KINDS,
    certs,
    create_topics,
    metrics_text,
    rdkafka,
    target,
    thread_split_s,
    trace_dir,
    writer_cpu_s,
)
from bench.procs import Sitting, cpu_s

KINDS = ("relay", "haproxy", "fetchlat", TRACED, NO_CORE, RELAYED, RELAYED_TRACED, HAPROXY_TLS, RELAYED_TLS_TRACED,
         CENTRAL_TRACED)
BASELINES = ("relay", "haproxy")  # and haproxy-tls where a TLS path runs


IDLE_S = 5.0  # how long the proxy's idle CPU is measured before the consume
# every row gathered before now is written by then (its batch's first row dated at a tick)
WRITTEN_AFTER_S = TRACE_HOLD_NS / 1e9 + TICK_S + 1.0
WRITTEN_BOUND_S = WRITTEN_AFTER_S + 15.0  # the longest a traced path's rows are waited for


def threads_s(pid: int) -> dict[str, float]:
    """A fetchlat's CPU seconds so far by thread: the relay's, the rest's (``thread_split_s``) and the
    trace writer's."""
    return {**thread_split_s(pid), TRACE_THREAD: writer_cpu_s(pid)}


def fetches(pid: int) -> float:
    """A fetchlat's Fetch requests so far (``fetchlat_requests_total``, every label), 0 for another proxy."""
    if pid not in METRICS_PORTS:
        return 0.0
    return sum(float(line.split()[-1]) for line in metrics_text(pid).splitlines()
               if line.startswith("fetchlat_requests_total{") and 'api="Fetch"' in line)


def one(kind: str, size: int, mb: float, work: Path, split: dict[str, float] | None = None) -> tuple[float, float]:
    """The proxy's CPU-s per GB of record values consumed: all of it, and net of what it spends
    idle for as long (its timers, heartbeats and calibration, measured just before): over a
    consume of a few seconds, the idle part is a fixed cost the relay and haproxy do not have.
    ``split``, if given, gets where it went: CPU-s per GB of a fetchlat's relay thread, of the rest
    (the event loop's thread, idle included), both to the drain, and of its trace writer to the
    rows' writing; and its Fetch requests per GB (read from its /metrics after the measure, so the
    scrape is not counted)."""
    n = int(mb * 1e6 / size)
    with target(kind, work) as (port, pid, _broker):
        assert pid is not None
        bootstrap = f"127.0.0.1:{port}"
        topic = f"s-{uuid.uuid4().hex[:6]}"
        ca = certs(work).ca if kind in TLS_KINDS else None
        tls = [] if ca is None else ["security.protocol=SSL", f"ssl.ca.location={ca}"]
        create_topics(bootstrap, topic, ca=ca)
        rdkafka("produce", bootstrap, topic, str(n), "linger.ms=0", f"batch.size={size + 100}", f"value.bytes={size}",
                *tls)
        traces = trace_dir(work, port) if kind in TRACED_KINDS else None
        if traces is not None:
            # the produce's rows first
            written(traces, grown_from=None, bound_s=WRITTEN_BOUND_S, after_s=WRITTEN_AFTER_S)
        time.sleep(1.0)
        i0 = cpu_s(pid)
        time.sleep(IDLE_S)
        idle_per_s = (cpu_s(pid) - i0) / IDLE_S
        before = tree_bytes(traces) if traces is not None else 0
        c0, t0 = cpu_s(pid), time.monotonic()
        s0 = threads_s(pid)
        rdkafka("consume", bootstrap, topic, str(n), f"value.bytes={size}", *tls)
        wall = time.monotonic() - t0
        time.sleep(DRAINED_S)  # the relay road's last items, drained at the proxy's tick
        used, span = cpu_s(pid) - c0, time.monotonic() - t0
        s1 = threads_s(pid)  # (the writer's to the end, below, as ``used`` counts it)
        used -= idle_per_s * (span - wall)
        if traces is not None:
            # a row is written up to the hold (30 s) after its request (proxy/traces.py), on the
            # writer's own thread: that thread's CPU until the consume's rows are on disk is the
            # consume's cost too, counted alone (it sleeps while idle), so the other threads'
            # timers and calibration over the wait are not counted, nor taken off by estimate
            w0 = writer_cpu_s(pid)
            written(traces, grown_from=before, settle_s=1.0, bound_s=WRITTEN_BOUND_S, after_s=WRITTEN_AFTER_S)
            used += writer_cpu_s(pid) - w0
        gb = n * size / 1e9
        if split is not None:
            s1[TRACE_THREAD] = writer_cpu_s(pid)
            split.update({name: (s1[name] - s0[name]) / gb for name in s0})
            split["fetches"] = fetches(pid) / gb
        return used / gb, max(0.0, used - idle_per_s * wall) / gb


def tree_bytes(traces: Path) -> int:
    """The bytes of the files under ``traces`` now."""
    total = 0
    for f in traces.rglob("*"):
        with contextlib.suppress(OSError):  # renamed into place meanwhile
            total += f.stat().st_size if f.is_file() else 0
    return total


def written(traces: Path, grown_from: int | None, settle_s: float = 4.0, bound_s: float = 20.0,
            after_s: float = 0.0) -> int:
    """``tree_bytes`` of a fetchlat's trace directory once it has held still for ``settle_s``
    (and, with ``grown_from``, grown past it), and not before ``after_s``, read off the files (no
    scrape: a scrape would cost the proxy CPU of its own); at most ``bound_s`` of waiting."""
    t0 = time.monotonic()
    last, since = tree_bytes(traces), time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if (grown_from is None or last > grown_from) and time.monotonic() - since >= settle_s \
                and time.monotonic() - t0 >= after_s:
            break
        time.sleep(0.1)
        now = tree_bytes(traces)
        if now != last:
            last, since = now, time.monotonic()
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--mb", type=float, default=10.0, help="MB of record values per measurement")
    ap.add_argument("--split", action="store_true", help="print where each fetchlat path's CPU went, by thread, "
                    "and its Fetch requests per GB (fetchlat_requests_total read after each measure)")
    ap.add_argument("--paths", default=",".join(KINDS), help="comma-separated, the baselines (relay, haproxy) "
                    "always among them: " + ", ".join(KINDS))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    asked = args.paths.split(",")
    tls_asked = any(k in TLS_KINDS for k in asked)
    kinds = tuple(k for k in KINDS if k in BASELINES or k in asked or (k == HAPROXY_TLS and tls_asked))
    got: dict[tuple[str, int], list[float]] = {}
    net: dict[tuple[str, int], list[float]] = {}
    sitting = Sitting()
    with tempfile.TemporaryDirectory() as d:
        for t in range(args.trials):
            order = kinds[t % len(kinds):] + kinds[:t % len(kinds)]
            for kind in order:
                for size in sizes:
                    split: dict[str, float] | None = {} if args.split else None
                    raw, less_idle = one(kind, size, args.mb, Path(d), split)
                    got.setdefault((kind, size), []).append(raw)
                    net.setdefault((kind, size), []).append(less_idle)
                    where = ""
                    if split and split.get("fetches"):
                        where = " [" + ", ".join(f"{k} {v:.3f}" for k, v in split.items() if k != "fetches") \
                            + f" CPU-s/GB; {split['fetches']:.0f} Fetches/GB]"
                    print(f"trial {t + 1} {kind:22s} {size:5d} B: {raw:.3f} CPU-s/GB ({less_idle:.3f} net of idle)"
                          f"{where}", flush=True)
    for title, figures in (("", got), (", net of the proxy's idle CPU over the consume's time", net)):
        print(f"\nproxy CPU-s per GB consumed, one-record batches{title} (median of {args.trials}, min-max):")
        for size in sizes:
            med = {k: statistics.median(figures[(k, size)]) for k in kinds}
            cells = "  ".join(f"{k} {med[k]:.3f} ({min(figures[(k, size)]):.3f}-{max(figures[(k, size)]):.3f})"
                              for k in kinds)
            print(f"  {size:5d} B records: {cells}")
            for k in kinds:
                if k not in BASELINES and k != HAPROXY_TLS:
                    ratio = f"{k} / relay {med[k] / med['relay']:.2f}, / haproxy {med[k] / med['haproxy']:.2f}"
                    if k in TLS_KINDS:
                        ratio += f", / {HAPROXY_TLS} {med[k] / med[HAPROXY_TLS]:.2f}"
                    print(f"  {'':5s}   {ratio}")
            for on, off in ((TRACED, "fetchlat"), (RELAYED_TRACED, RELAYED)):
                if on in med and off in med:
                    print(f"  {'':5s}   traces on / off ({off}) {med[on] / med[off]:.2f}")
    print(Sitting.line(sitting.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

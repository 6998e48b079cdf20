"""A sidecar whose connections the native core carries after their first answer (``relay:
native``, ``proxy/relayed.py``), against a real Tansu: real clients get every record through it,
and the same scripted conversation through it and through a sidecar whose event loop carries
everything is counted alike, row for row and counter for counter. The policies hold on a
connection the core carries: a refused frame, a request never finished, an idle client."""

from __future__ import annotations

import signal
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fetchlat import native
from fetchlat.protocol import apis
from fetchlat.proxy.memory import CENSUS_TOP

from testkit.census import census_lines
from testkit.procfs import rss_by_mapping_mb

from .conftest import TANSU_NODE_ID, Broker, ProxyProc, free_ports, run_tansu, start_proxy, stop_proxy
from .test_model_live import consumer_fetches, follower_fetch, samples
from .test_routing import Client
from .traffic import expected, roundtrip

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(native.core() is None, reason=f"native core not loaded: {native.reason()}")]

TIMEOUTS = "partial_frame_timeout_s: 1\nidle_timeout_s: 2\nmax_frame_bytes: 1048576\n"
BIG_RECORDS = 4000  # one-record batches: a fetch of them all is a few hundred KB
# what the differential compares: counters and histogram counts, whatever the timings were
COMPARED = ("fetchlat_requests_total", "fetchlat_fetches_total", "fetchlat_bytes_total",
            "fetchlat_fetch_seconds_count", "fetchlat_record_latency_seconds_count",
            "fetchlat_trace_rows_dropped_total", "fetchlat_decode_errors_total", "fetchlat_rewritten_responses_total")
# trace columns made of times (they differ run to run); every other column must agree
TIMED = {"ts_ns", "proxy_id", "conn_id", "total_ns", "wait_ns", "local_ns", "e2e_ns", "first_byte_ns",
         "transfer_ns", "wake_lag_ns", "record_latency_ns", "wait_basis", "confident", "outcome", "wait_source"}


class Sidecars:
    def __init__(self, broker: Broker, native_: ProxyProc, loop: ProxyProc, traces: dict[str, Path]) -> None:
        self.broker, self.native, self.loop, self.traces = broker, native_, loop, traces


@pytest.fixture
def sidecars(tmp_path: Path) -> Iterator[Sidecars]:
    """Tansu advertising the relayed sidecar (real clients land on it), and a second sidecar of
    the same broker whose event loop carries every connection, for the scripted conversation."""
    base = free_ports(0, 1000)
    other = free_ports(0, 1000)
    cfg = tmp_path / "timeouts.yaml"
    cfg.write_text(TIMEOUTS)
    traces = {"native": tmp_path / "tr-native", "loop": tmp_path / "tr-loop"}
    with run_tansu(tmp_path / "tansu.log", advertise_port=base) as broker:
        common = ("--sidecar-node", str(TANSU_NODE_ID), "--config", str(cfg), "--expiry-overshoot-ms", "1")
        n = start_proxy(broker.bootstrap, tmp_path, *common, "--relay", "native", "--trace-dir",
                        str(traces["native"]), base=base)
        try:
            o = start_proxy(broker.bootstrap, tmp_path, *common, "--relay", "off", "--trace-dir", str(traces["loop"]),
                            base=other)
            try:
                yield Sidecars(broker, n, o, traces)
            finally:
                stop_proxy(o)
        finally:
            stop_proxy(n)


def counted(proxy: ProxyProc) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(name, k): v for name in COMPARED for k, v in samples(proxy, name).items()}


def delta(after: dict[Any, float], before: dict[Any, float]) -> dict[Any, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def script(port: int, topic: str, topic_id: uuid.UUID, check_relayed: ProxyProc | None,
           big: tuple[str, uuid.UUID] | None = None) -> None:
    """One scripted connection: ApiVersions (answered by the event loop), then what the core
    carries: Metadata, consumer fetches with and without records, follower fetches; and a
    fetch of ``big``'s thousands of records from its start, an answer of hundreds of KB that
    the core reads in many pieces (and, carrying the connection, digests: ``digest.rs``)."""
    c = Client(port)
    try:
        c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "relay-test", "ClientSoftwareVersion": "1"})
        c.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}]})
        if check_relayed is not None:
            assert check_relayed.health()["relayed"] >= 1, "the connection was not handed to the core"
        for offset in (0, 10, 20):
            consumer_fetch(c, topic, topic_id, offset)
        for _ in range(2):  # capped from Python, then by the core from Python's answer (relay/memo.rs, Memo)
            c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "relay-test", "ClientSoftwareVersion": "1"})
        follower_fetch(c, 12, 2, topic, topic_id, 0)
        follower_fetch(c, 15, 3, topic, topic_id, 20)
        if big is not None:
            consumer_fetch(c, big[0], big[1], 0)
    finally:
        c.close()


def consumer_fetch(c: Client, topic: str, topic_id: uuid.UUID, offset: int) -> None:
    c.call(apis.FETCH, 12, {
        "ReplicaId": -1, "MaxWaitMs": 50, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0,
        "SessionId": 0, "SessionEpoch": -1, "ForgottenTopicsData": [], "RackId": "",
        "Topics": [{"Topic": topic, "TopicId": topic_id, "Partitions": [
            {"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": offset, "LastFetchedEpoch": -1,
             "LogStartOffset": 0, "PartitionMaxBytes": 1 << 20}]}]})


def rows(directory: Path, table: str) -> list[dict[str, Any]]:
    out = [r for f in sorted((directory / table).rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return sorted(({k: v for k, v in r.items() if k not in TIMED} for r in out if r.get("client_id") == "routing-test"),
                  key=repr)


def test_the_core_carries_real_clients_and_counts_what_the_event_loop_counts(sidecars: Sidecars) -> None:
    n, o = sidecars.native, sidecars.loop
    topic = f"relay-{uuid.uuid4().hex[:6]}"
    # every record, in order, through the core (the clients' handles go, and their connections, on return)
    assert roundtrip(n.bootstrap, topic, n=20) == expected(topic, 20)
    handovers = samples(n, "fetchlat_relay_handovers_total")[()]
    assert handovers >= 2, "the real clients' connections were not handed to the core"
    assert consumer_fetches(n) >= 1
    gone_by = time.monotonic() + 10
    while n.health()["connections"] and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert n.health()["connections"] == 0, "real clients' connections outlived them"
    assert samples(n, "fetchlat_connections_relayed")[()] == 0

    big = f"relay-big-{uuid.uuid4().hex[:6]}"
    assert len(roundtrip(n.bootstrap, big, n=BIG_RECORDS)) == BIG_RECORDS

    # the same scripted conversation through both sidecars: the same counts and trace rows
    for proxy in (n, o):  # the same connection for the topics' ids through each
        md = Client(proxy.listen_port)
        named = [{"Name": t, "TopicId": uuid.UUID(int=0)} for t in (topic, big)]
        answer = md.call(apis.METADATA, 12, {"Topics": named})
        ids = {t["Name"]: t["TopicId"] for t in answer["Topics"]}
        topic_id = ids[topic]
        md.close()
    time.sleep(1.5)  # the core's byte counts come back every half second
    before = {"native": counted(n), "loop": counted(o)}
    stamped = samples(n, "fetchlat_stamps_total")
    script(n.listen_port, topic, topic_id, check_relayed=n, big=(big, ids[big]))
    kernel = (("source", "kernel"),)
    # the core's reads of the broker are stamped by the kernel, and counted as the event loop's are
    assert samples(n, "fetchlat_stamps_total")[kernel] >= stamped.get(kernel, 0) + 7
    script(o.listen_port, topic, topic_id, check_relayed=None, big=(big, ids[big]))
    assert samples(o, "fetchlat_relay_handovers_total")[()] == 0  # the event loop's alone
    time.sleep(1.5)
    native_delta, loop_delta = delta(counted(n), before["native"]), delta(counted(o), before["loop"])
    assert native_delta == loop_delta
    assert any(k[0] == "fetchlat_fetches_total" and dict(k[1])["kind"] == "follower" for k in native_delta)
    # the relay's thread, the trace writer's and the loop allocate from one heap (proxy/memory.py)
    assert rss_by_mapping_mb(n.proc.pid)["thread_arenas"] == 0
    stop_proxy(n)  # flushes the trace files
    stop_proxy(o)
    for table in ("exchanges", "partitions"):
        native_rows, loop_rows = rows(sidecars.traces["native"], table), rows(sidecars.traces["loop"], table)
        assert native_rows and native_rows == loop_rows, table
    assert "Traceback" not in n.log()


def after_api_versions(port: int) -> socket.socket:
    """A raw connection whose first exchange is done: the core carries it from here."""
    c = Client(port)
    c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "relay-test", "ClientSoftwareVersion": "1"})
    return c.sock


def closed_within(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_the_policies_hold_on_a_connection_the_core_carries(sidecars: Sidecars) -> None:
    n = sidecars.native
    healthy = Client(n.listen_port)
    healthy.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "relay-test", "ClientSoftwareVersion": "1"})
    oversized = after_api_versions(n.listen_port)
    partial = after_api_versions(n.listen_port)
    idle = after_api_versions(n.listen_port)
    sasl = Client(n.listen_port)  # after a SaslHandshake v0 its bytes are the Python road's alone
    sasl.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "relay-test", "ClientSoftwareVersion": "1"})
    sasl.call(apis.SASL_HANDSHAKE, 0, {"Mechanism": "PLAIN"})
    assert n.health()["relayed"] >= 5
    oversized.sendall(struct.pack(">i", 4 << 20) + b"\x00" * 16)  # past max_frame_bytes (1 MiB)
    partial.sendall(struct.pack(">i", 100) + b"\x00\x03")  # a request begun, never finished
    sasl.sock.sendall(struct.pack(">i", 100) + b"\x00\x03")  # a raw token begun, never finished
    assert closed_within(oversized, 3.0)
    for _ in range(6):  # the healthy one keeps talking: it is never idle
        healthy.call(apis.METADATA, 12, {"Topics": []})
        time.sleep(0.5)
    assert closed_within(partial, 3.0)
    assert closed_within(sasl.sock, 1.0)
    assert closed_within(idle, 3.0)
    healthy.call(apis.METADATA, 12, {"Topics": []})  # still served
    healthy.close()
    for s in (oversized, partial, idle, sasl.sock):
        s.close()
    metrics = n.metrics()
    for reason in ("request_framing", "partial_frame_timeout", "idle_timeout"):
        assert f'fetchlat_connection_errors_total{{reason="{reason}"}}' in metrics, reason
    log = n.log()
    assert "request framing lost (request frame of 4194304 bytes exceeds the limit of 1048576" in log
    assert "partial frame timeout" in log and "idle timeout" in log
    assert "Traceback" not in log
    deadline = time.monotonic() + 5
    while n.health()["relayed"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert n.health()["relayed"] == 0 and n.health()["connections"] == 0


def test_hostile_streams_cost_only_their_own_connection(sidecars: Sidecars) -> None:
    """Hostile bytes through the relay while an unrelated relayed client keeps asking: uploads
    whose counts claim more than their frame holds or whose tags fill it, frame sizes the wire
    refuses, a trickle. The unrelated client gets every answer, each hostile connection ends
    (refused by the proxy with a counted reason where its framing is lost, by the broker where
    it cannot read the request), and the proxy goes on. How long the client waited is the
    bench's to say (bench/hostile_relay.py), not a test's."""
    import threading

    from testkit.hostile import STREAMS

    n = sidecars.native
    probe = Client(n.listen_port)
    probe.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "relay-test", "ClientSoftwareVersion": "1"})
    stop, answered, failed = threading.Event(), [0], []

    def ask() -> None:
        while not stop.is_set():
            try:
                probe.call(apis.METADATA, 12, {"Topics": []})
            except Exception as exc:  # any failure of the unrelated client is the finding
                failed.append(exc)
                return
            answered[0] += 1
            time.sleep(0.005)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    ended = {}
    size = 4 << 20  # under the sidecar's max_frame_bytes (1 MiB: refused) and over it
    for name, make in STREAMS.items():
        for limit in (size, 512 << 10):
            s = after_api_versions(n.listen_port)
            frame = make(limit)
            try:
                for at in range(0, len(frame), 64 << 10):
                    s.sendall(frame[at:at + (64 << 10)])
            except OSError:
                pass  # refused mid-upload: its end is what counts
            ended[(name, limit)] = closed_within(s, 10.0)
            s.close()
    for raw in (b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xfe", b"\x00\x00\x00\x00"):
        s = after_api_versions(n.listen_port)
        s.sendall(raw + b"\x00" * 8)
        ended[("size " + raw.hex(), 0)] = closed_within(s, 3.0)
        s.close()
    stop.set()
    asking.join(10)
    assert not failed, failed
    assert answered[0] > 50, answered[0]
    assert all(ended.values()), [k for k, v in ended.items() if not v]
    probe.call(apis.METADATA, 12, {"Topics": []})  # still served
    probe.close()
    framing = samples(n, "fetchlat_connection_errors_total").get((("reason", "request_framing"),), 0.0)
    assert framing >= 4 + len(STREAMS)  # the odd sizes, and every upload over max_frame_bytes
    assert "Traceback" not in n.log()
    deadline = time.monotonic() + 5  # every connection gone, nothing held for them
    while n.health()["connections"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert n.health()["relayed"] == 0 and n.health()["connections"] == 0


PER_CONNECTION = ("ClientSide", "BrokerSide", "CarriedSide", "Conversation", "StampedReader")


def census_by_type(proxy: ProxyProc) -> dict[str, int]:
    """Ask the running proxy for a heap census (SIGUSR1, ``proxy/memory.py``): the tracked objects
    by type, the most numerous first (its first census: none is logged unless asked)."""
    proxy.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not (seen := census_lines(proxy.log())):
        assert time.monotonic() < deadline, "no heap census logged"
        time.sleep(0.1)
    return seen[0][3]


def test_a_closed_connections_objects_go_as_it_closes(sidecars: Sidecars) -> None:
    """On both roads, a connection's objects are freed when it closes, by their reference counts,
    not left for the collector's next full pass: a storm of connections would otherwise hold all
    of theirs until then (``session.ClientSide.forget``). The connections live through enough
    traffic that the collector has moved their objects out of its youngest generation."""
    for proxy in (sidecars.native, sidecars.loop):
        clients = [Client(proxy.listen_port) for _ in range(40)]
        for _ in range(3):
            for c in clients:
                c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "relay-test", "ClientSoftwareVersion": "1"})
                c.call(apis.METADATA, 12, {"Topics": []})
        for c in clients:
            c.close()
        deadline = time.monotonic() + 5
        while (proxy.health()["connections"] or proxy.health().get("relayed")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proxy.health()["connections"] == 0
        by_type = census_by_type(proxy)
        listed_down_to = min(by_type.values())
        assert listed_down_to < len(clients) or len(by_type) < CENSUS_TOP, by_type  # 40 of a kind would be listed
        assert not {k: v for k, v in by_type.items() if k in PER_CONNECTION}, (proxy.listen_port, by_type)

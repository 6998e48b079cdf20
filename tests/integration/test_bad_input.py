"""Bad input on a listener closes only the offending connection, with one clear log line,
while a healthy producer and consumer keep flowing through the same proxy and lose nothing."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fetchlat.protocol.framing import request_header

from .conftest import Broker, ProxyProc, start_proxy, stop_proxy
from .traffic import steady_traffic

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
    p = strict_proxy
    with steady_traffic(p.bootstrap) as healthy:
        time.sleep(0.5)  # each rule is scripted in tests/proxy/test_conversation.py; this proves it end to end
        _attacks(p)
        time.sleep(0.5)
    assert len(healthy.sent) > 20 and healthy.got == healthy.sent  # every record, in order: nothing lost
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


def _attacks(p: ProxyProc) -> None:
    port = p.listen_port
    node_port = p.listen_port + 112
    unknown_api = request_header(999, 0, 1, "x")  # an api key no spec names
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

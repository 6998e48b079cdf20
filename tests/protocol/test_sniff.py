"""What a non-Kafka peer sent first on a plaintext listener."""

from __future__ import annotations

import struct

import pytest
from fetchlat.protocol.sniff import sniff

from testkit.captures import frames


@pytest.mark.parametrize(("first", "kind"), [
    (bytes.fromhex("160301020001"), "tls"),  # TLS 1.0 record header, as TLS 1.2/1.3 ClientHellos start
    (bytes.fromhex("160303"), "tls"),
    (b"GET / HTTP/1.1\r\n", "http"),
    (b"POST /x HTTP/1.1", "http"),
    (b"PRI * HTTP/2.0", "http"),
    (struct.pack(">i", 64) + b"\x00\x12", None),  # a Kafka frame
    (b"\x16", None),  # too short to tell
])
def test_sniff(first: bytes, kind: str | None) -> None:
    assert sniff(first) == kind


def test_no_captured_kafka_request_looks_like_tls_or_http() -> None:
    for f in frames("confluent") + frames("kafkapython") + frames("aiokafka") + frames("kcat"):
        if f.direction == "req":
            assert sniff(f.wire[:8]) is None

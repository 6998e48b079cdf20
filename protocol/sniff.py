"""Recognise what a non-Kafka peer sent first on a plaintext listener, so the proxy can say
so in one clear log line instead of "frame size 369295616 exceeds the limit".

A Kafka request starts with a 4-byte big-endian size, small enough that its first byte is
0 for any frame under 16 MiB; TLS and HTTP start with bytes no real Kafka frame does."""

from __future__ import annotations

from typing import Final

HTTP_METHODS: Final = (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC", b"PRI ")


def sniff(first: bytes) -> str | None:
    """'tls', 'http', or None (looks like Kafka, or too short to tell)."""
    if len(first) >= 3 and first[0] == 0x16 and first[1] == 0x03 and first[2] <= 0x04:
        return "tls"  # a TLS handshake record (ClientHello), versions SSL3.0 - TLS1.3
    if len(first) >= 4 and first[:4] in HTTP_METHODS:
        return "http"
    return None

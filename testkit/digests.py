"""What the codec reads of a message the native core digests (``native/src/digest.rs``): the
reference the digest tests and the fuzz harness hold the core's digest to."""

from __future__ import annotations

from fetchlat.protocol import fetch_now, produce_now
from fetchlat.protocol.errors import DecodeError


def codec_reads(body: bytes, version: int, produce: bool = False) -> object:
    """What the codec reads of a Fetch answer's body after its correlation id (a Produce
    request's body, with ``produce``), or DecodeError."""
    try:
        if produce:
            return produce_now.parse_request_now(body, version)
        return fetch_now.parse_response_now(body, version, after_correlation_id=True)
    except DecodeError:
        return DecodeError

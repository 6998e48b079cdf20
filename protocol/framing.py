"""Kafka framing: the 4-byte size prefix with its limit, and whole request frames for callers
that send their own requests (the proxy's broker discovery, tests, benchmarks).

Owns: what a valid frame size is, and how a request header is encoded
(``apis.request_header_version``: ClientId an int16 string even in header v2, the v2 tag
buffer). Must never: do I/O.
"""

from __future__ import annotations

import struct
from typing import Final

from librt.strings import read_i32_be

from .apis import request_header_version, response_header_version
from .errors import FramingError
from .primitives import encode_string

DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024
SIZE_BYTES: Final = 4
_HEADER: Final = struct.Struct(">hhi")

Segment = bytes | memoryview


def be_i32(raw: bytes | bytearray | memoryview, pos: int) -> int:
    """The big-endian signed 32-bit integer at ``pos``, read where it lies (librt's reader:
    native in the compiled build), against ~1 900 instructions for ``int.from_bytes`` of a slice
    (its keyword arguments parsed on every call; ``bench/instr_round_trips.py``)."""
    if isinstance(raw, bytes):
        return read_i32_be(raw, pos)
    return int.from_bytes(raw[pos : pos + 4], "big", signed=True)  # another buffer: a copy


def frame_size(raw: bytes | bytearray | memoryview, max_frame_bytes: int, side: str, pos: int = 0) -> int:
    """The size the 4-byte prefix at ``pos`` announces; FramingError when it is not positive or
    too big."""
    size = be_i32(raw, pos)
    if size <= 0:
        raise FramingError(f"{side} frame size {size} is not positive")
    if size > max_frame_bytes:
        raise FramingError(
            f"{side} frame of {size} bytes exceeds the limit of {max_frame_bytes} "
            "(raise max_frame_bytes if this is legitimate)"
        )
    return size


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A request header in the version the api key and version call for."""
    hv = request_header_version(api_key, api_version)
    out = _HEADER.pack(api_key, api_version, correlation_id)
    if hv >= 1:
        out += encode_string(client_id, False)
    if hv >= 2:
        out += b"\x00"  # no tagged fields
    return out


def request_frame(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: bytes) -> bytes:
    """A whole request frame: size prefix, header, body."""
    frame = request_header(api_key, api_version, correlation_id, client_id) + body
    return len(frame).to_bytes(SIZE_BYTES, "big") + frame


def response_frame(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """A whole response frame (what a broker sends): size prefix, header, body."""
    header = correlation_id.to_bytes(4, "big", signed=True)
    if response_header_version(api_key, api_version) >= 1:
        header += b"\x00"
    frame = header + body
    return len(frame).to_bytes(SIZE_BYTES, "big") + frame

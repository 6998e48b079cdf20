"""Primitive readers and writers of the Kafka wire format.

Readers take ``(buf, pos)`` over any bytes-like object and return ``(value, new_pos)``;
they read in place (precompiled ``struct.Struct.unpack_from``) and never copy a payload.
Reading past the end raises ``DecodeError``. Must never: hold state, or import I/O.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from typing import Final

from .errors import DecodeError

Buf = bytes | bytearray | memoryview

# True in the compiled build (this module is then an extension, not a .py). There, librt's byte
# readers (``librt.strings.read_i32_be`` …) read a field of a ``bytes`` buffer as a machine
# integer in place; in the pure build each is a call dearer than one struct unpack, so the
# readers that use them do so only here.
NATIVE: Final = not __file__.endswith(".py")

I8: Final = struct.Struct(">b")
I16: Final = struct.Struct(">h")
U16: Final = struct.Struct(">H")
I32: Final = struct.Struct(">i")
U32: Final = struct.Struct(">I")
I64: Final = struct.Struct(">q")
F64: Final = struct.Struct(">d")

FIXED: Final[dict[str, struct.Struct]] = {
    "int8": I8, "int16": I16, "uint16": U16, "int32": I32,
    "uint32": U32, "int64": I64, "float64": F64,
}


def read_fixed(st: struct.Struct, buf: Buf, pos: int) -> tuple[int, int]:
    try:
        return st.unpack_from(buf, pos)[0], pos + st.size
    except struct.error:
        raise DecodeError(f"need {st.size} bytes at offset {pos}, frame ends at {len(buf)}") from None


def uvarint_at(buf: Buf, pos: int) -> tuple[int, int]:
    """The one reader of Kafka's unsigned varints (LEB128; at most 10 bytes): ``(value,
    next position)``, or ``(0, -1)`` when the buffer ends inside the varint (a stream reader
    then waits for more bytes; a whole-frame reader raises)."""
    result = 0
    shift = 0
    end = len(buf)
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError(f"varint longer than 10 bytes at offset {pos}")
    return 0, -1


def read_uvarint(buf: Buf, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 as Kafka uses it (at most 5 bytes for 32-bit, 10 for 64-bit)."""
    value, end = uvarint_at(buf, pos)
    if end < 0:
        raise DecodeError(f"varint runs past the end of the frame at offset {pos}")
    return value, end


def read_varint(buf: Buf, pos: int) -> tuple[int, int]:
    """Signed zigzag varint/varlong."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("uvarint cannot encode a negative number")
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_varint(value: int) -> bytes:
    return encode_uvarint((value << 1) ^ (value >> 63))


def read_bytes_span(buf: Buf, pos: int, length: int) -> tuple[int, int]:
    """Check that ``length`` bytes exist at ``pos``; return the span end."""
    end = pos + length
    if length < 0 or end > len(buf):
        raise DecodeError(f"field of {length} bytes at offset {pos} runs past the frame end {len(buf)}")
    return end, end


def decode_str(buf: Buf, start: int, end: int) -> str:
    try:
        return bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string at offset {start} is not UTF-8") from exc


def read_string(buf: Buf, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n, pos = read_fixed(I16, buf, pos)
    if n < 0:
        return None, pos
    end, _ = read_bytes_span(buf, pos, n)
    return decode_str(buf, pos, end), end


def encode_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else I16.pack(-1)
    raw = value.encode("utf-8")
    if flexible:
        return encode_uvarint(len(raw) + 1) + raw
    return I16.pack(len(raw)) + raw


def read_uuid(buf: Buf, pos: int) -> tuple[_uuid.UUID, int]:
    end, _ = read_bytes_span(buf, pos, 16)
    return _uuid.UUID(bytes=bytes(buf[pos:end])), end

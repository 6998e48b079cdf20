"""Spec-driven encoder: the inverse of ``walker``, for the frames the proxy must re-encode
(ApiVersions) and for tests' scripted brokers and oracle comparisons.

Values are plain Python (dicts, lists, ints, str, bytes) or walked ``Struct``/``Span`` values
resolved against ``src``. Unknown tags of a walked ``Struct`` are copied verbatim. Tagged
fields holding their default are omitted, as Java Kafka does (docs/proxy.md).
Must never: do I/O.
"""

from __future__ import annotations

import uuid as _uuid
from typing import Any

from .primitives import FIXED, I8, I32, Buf, encode_string, encode_uvarint
from .schema import FieldSpec, MessageSpec
from .walker import Span, Struct, _field_flexible


def is_default(field: FieldSpec, value: Any) -> bool:
    if field.is_array:
        # Kafka's tagged arrays default to empty (or null where nullable).
        return value is None or len(value) == 0
    if field.type == "struct":
        if value is None:
            return True
        values = value.values if isinstance(value, Struct) else value
        if isinstance(value, Struct) and any(t.name is None for t in value.tags):
            return False
        return all(is_default(f, values.get(f.name, _default_of(f))) for f in field.fields)
    return bool(value == _default_of(field))


def _default_of(field: FieldSpec) -> Any:
    if field.is_array:
        return []
    if field.default is not None:
        return field.default
    if field.type in FIXED:
        return 0
    if field.type == "bool":
        return False
    if field.type == "string":
        return ""
    if field.type == "uuid":
        return _uuid.UUID(int=0)
    if field.type == "struct":
        return {}
    return None


def _encode_value(field: FieldSpec, version: int, flexible: bool, value: Any, src: Buf | None, out: bytearray) -> None:
    t = field.type
    st = FIXED.get(t)
    if st is not None:
        out += st.pack(value)
    elif t == "bool":
        out += I8.pack(1 if value else 0)
    elif t == "string":
        out += encode_string(value, flexible)
    elif t == "uuid":
        out += value.bytes
    elif t in ("bytes", "records"):
        if isinstance(value, Span):
            if src is None:
                raise ValueError("a Span value needs its source buffer")
            value = bytes(src[value.start : value.end])
        if value is None:
            out += b"\x00" if flexible else I32.pack(-1)
        else:
            out += encode_uvarint(len(value) + 1) if flexible else I32.pack(len(value))
            out += value
    else:
        encode_fields(field.fields, version, flexible, value, src, out)


def _encode_field(field: FieldSpec, version: int, flexible: bool, value: Any, src: Buf | None, out: bytearray) -> None:
    flexible = _field_flexible(field, version, flexible)
    if not field.is_array:
        _encode_value(field, version, flexible, value, src, out)
        return
    if value is None:
        out += b"\x00" if flexible else I32.pack(-1)
        return
    out += encode_uvarint(len(value) + 1) if flexible else I32.pack(len(value))
    for item in value:
        _encode_value(field, version, flexible, item, src, out)


def encode_fields(
    fields: tuple[FieldSpec, ...], version: int, flexible: bool, value: Any, src: Buf | None, out: bytearray
) -> None:
    values: dict[str, Any] = value.values if isinstance(value, Struct) else (value or {})
    tag_parts: list[tuple[int, bytes]] = []
    for field in fields:
        v = values[field.name] if field.name in values else _default_of(field)
        if field.is_tagged(version):
            if flexible and not is_default(field, v):
                tag_body = bytearray()
                _encode_field(field, version, True, v, src, tag_body)
                tag_parts.append((field.tag, bytes(tag_body)))  # type: ignore[arg-type]
            continue
        if version in field.versions:
            _encode_field(field, version, flexible, v, src, out)
    if not flexible:
        return
    if isinstance(value, Struct) and src is not None:
        for entry in value.tags:
            if entry.name is None:
                tag_parts.append((entry.tag, bytes(src[entry.value_start : entry.end])))
    tag_parts.sort(key=lambda p: p[0])
    out += encode_uvarint(len(tag_parts))
    for tag, body in tag_parts:
        out += encode_uvarint(tag)
        out += encode_uvarint(len(body))
        out += body


def encode(spec: MessageSpec, version: int, value: Any, src: Buf | None = None) -> bytes:
    out = bytearray()
    encode_fields(spec.fields, version, version in spec.flexible, value, src, out)
    return bytes(out)

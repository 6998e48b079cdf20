"""Spec-driven walker: decodes any message of the bundled specs into a ``Struct`` tree that
remembers where every field lies, so rewriters can splice exactly the bytes they change.

``bytes`` and ``records`` fields are never copied or decoded: their value is a ``Span`` of the
buffer (record batches are skipped by length). Must never: copy payloads, or do I/O.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from .errors import DecodeError
from .primitives import (
    FIXED,
    I8,
    I32,
    Buf,
    read_bytes_span,
    read_fixed,
    read_string,
    read_uuid,
    read_uvarint,
)
from .schema import FieldSpec, MessageSpec


class Span(NamedTuple):
    """Where a bytes/records field's content lies in the walked buffer."""

    start: int
    end: int


class TagEntry(NamedTuple):
    tag: int
    start: int  # first byte of the uvarint tag
    value_start: int
    end: int
    name: str | None  # None for a tag this spec does not know


class Struct:
    """One decoded struct: values by field name, each field's byte span, its tag entries."""

    __slots__ = ("end", "spans", "start", "tags", "values")

    def __init__(self, start: int) -> None:
        self.values: dict[str, Any] = {}
        self.spans: dict[str, tuple[int, int]] = {}
        self.tags: list[TagEntry] = []
        self.start = start
        self.end = start

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def to_plain(self, buf: Buf | None = None) -> dict[str, Any]:
        """Plain dicts/lists, for tests and oracles; spans become bytes if ``buf`` is given."""

        def conv(v: Any) -> Any:
            if isinstance(v, Struct):
                return v.to_plain(buf)
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, Span) and buf is not None:
                return bytes(buf[v.start : v.end])
            return v

        return {k: conv(v) for k, v in self.values.items()}


def _field_flexible(field: FieldSpec, version: int, flexible: bool) -> bool:
    if field.flexible_override is not None:
        return version in field.flexible_override
    return flexible


def _read_value(field: FieldSpec, version: int, flexible: bool, buf: Buf, pos: int) -> tuple[Any, int]:
    t = field.type
    st = FIXED.get(t)
    if st is not None:
        return read_fixed(st, buf, pos)
    if t == "bool":
        v, pos = read_fixed(I8, buf, pos)
        return v != 0, pos
    if t == "string":
        return read_string(buf, pos, flexible)
    if t == "uuid":
        return read_uuid(buf, pos)
    if t in ("bytes", "records"):
        if flexible:
            n, pos = read_uvarint(buf, pos)
            n -= 1
        else:
            n, pos = read_fixed(I32, buf, pos)
        if n < 0:
            return None, pos
        end, _ = read_bytes_span(buf, pos, n)
        return Span(pos, end), end
    # struct
    return walk_fields(field.fields, version, flexible, buf, pos)


def _read_field(field: FieldSpec, version: int, flexible: bool, buf: Buf, pos: int) -> tuple[Any, int]:
    flexible = _field_flexible(field, version, flexible)
    if not field.is_array:
        return _read_value(field, version, flexible, buf, pos)
    if flexible:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n, pos = read_fixed(I32, buf, pos)
    if n < 0:
        return None, pos
    if n > len(buf) - pos:
        raise DecodeError(f"array {field.name} claims {n} elements, more than the bytes left")
    items = []
    for _ in range(n):
        v, pos = _read_value(field, version, flexible, buf, pos)
        items.append(v)
    return items, pos


def walk_fields(
    fields: tuple[FieldSpec, ...], version: int, flexible: bool, buf: Buf, pos: int
) -> tuple[Struct, int]:
    out = Struct(pos)
    tagged: dict[int, FieldSpec] = {}
    for field in fields:
        if field.is_tagged(version):
            if flexible:
                tagged[field.tag] = field  # type: ignore[index]
            continue
        if version not in field.versions:
            continue
        start = pos
        out.values[field.name], pos = _read_field(field, version, flexible, buf, pos)
        out.spans[field.name] = (start, pos)
    if flexible:
        pos = _walk_tags(out, tagged, version, buf, pos)
    out.end = pos
    return out, pos


def _walk_tags(out: Struct, tagged: dict[int, FieldSpec], version: int, buf: Buf, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    if count > len(buf) - pos:
        raise DecodeError(f"tag buffer claims {count} tags, more than the bytes left")
    last = -1
    for _ in range(count):
        start = pos
        tag, pos = read_uvarint(buf, pos)
        if tag <= last:
            raise DecodeError(f"tagged fields out of order: {tag} after {last}")
        last = tag
        size, pos = read_uvarint(buf, pos)
        end, _ = read_bytes_span(buf, pos, size)
        field = tagged.get(tag)
        if field is not None:
            value, vend = _read_field(field, version, True, buf, pos)
            if vend != end:
                raise DecodeError(f"tagged field {field.name} is {size} bytes but decodes to {vend - pos}")
            out.values[field.name] = value
            out.spans[field.name] = (pos, end)
        out.tags.append(TagEntry(tag, start, pos, end, field.name if field else None))
        pos = end
    return pos


def walk(spec: MessageSpec, version: int, buf: Buf, pos: int = 0, *, end: int | None = None) -> Struct:
    """Decode a whole message body at ``buf[pos:end]``; trailing bytes are allowed and
    remembered in ``Struct.end`` (brokers ignore them, so do we)."""
    if version not in spec.valid:
        raise DecodeError(f"{spec.name} v{version} is outside the spec's versions {spec.valid.lo}-{spec.valid.hi}")
    view = buf if end is None or end == len(buf) else memoryview(buf)[:end]
    try:
        out, _ = walk_fields(spec.fields, version, version in spec.flexible, view, pos)
    except (struct.error, IndexError, OverflowError, ValueError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"{spec.name} v{version}: {exc}") from exc
    return out

"""Hypothesis strategies that generate message values straight from the bundled specs."""

from __future__ import annotations

from typing import Any

from fetchlat.protocol.schema import FieldSpec
from hypothesis import strategies as st

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1),
}


def _error_codes() -> list[int]:
    from kio.schema.errors import ErrorCode  # real Kafka codes; kio rejects the rest

    return sorted(int(e.value) for e in ErrorCode)


def _value(field: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    t = field.type
    if field.name == "ErrorCode" and t == "int16":
        s: st.SearchStrategy[Any] = st.sampled_from(_error_codes())
    elif t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        s = st.integers(lo, hi)
    elif t == "bool":
        s = st.booleans()
    elif t == "float64":
        s = st.floats(allow_nan=False, allow_infinity=False)
    elif t == "string":
        s = st.text(max_size=8)
    elif t in ("bytes", "records"):
        s = st.binary(max_size=12) if t == "bytes" else st.just(b"")
    elif t == "uuid":
        s = st.uuids()
    else:
        s = struct_strategy(field.fields, version)
    return s


def field_strategy(field: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    s = _value(field, version)
    if field.is_array:
        s = st.lists(s, max_size=3)
    if version in field.nullable:
        s = st.none() | s
    return s


def struct_strategy(fields: tuple[FieldSpec, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({f.name: field_strategy(f, version) for f in fields if f.present(version)})

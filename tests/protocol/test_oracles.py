"""Every version of the APIs the proxy rewrites, checked against two independent codecs:
kafka-python 3.x and kio decode what our encoder writes and re-encode it byte for byte,
kafka-python's decoded values equal ours, and our walker round-trips their bytes."""

from __future__ import annotations

import importlib
import re
import uuid
from typing import Any

import pytest
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.schema import load
from fetchlat.protocol.walker import walk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .specgen import struct_strategy

MESSAGES = [
    ("ApiVersions", "kafka.protocol.metadata", "api_versions"),
    ("Metadata", "kafka.protocol.metadata", "metadata"),
    ("FindCoordinator", "kafka.protocol.metadata", "find_coordinator"),
    ("DescribeCluster", "kafka.protocol.admin", "describe_cluster"),
]

# Versions newer than both oracles know: ApiVersions v5 (Kafka 4.4, taken from its client jar's
# schemas; test_rewrite.py covers its cap) is beyond kafka-python 3.0 and kio.
ORACLE_MAX = {"ApiVersions": 4}

CASES = [
    (name, kind, v)
    for name, _, _ in MESSAGES
    for kind in ("Request", "Response")
    for v in range(load(name + kind).valid.lo, min(load(name + kind).valid.hi, ORACLE_MAX.get(name, 99)) + 1)
]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _kp_class(name: str, kind: str) -> Any:
    mod = importlib.import_module({n: m for n, m, _ in MESSAGES}[name])
    return getattr(mod, name + kind)


def _kio_class(name: str, kind: str, version: int) -> Any:
    snake = {n: s for n, _, s in MESSAGES}[name]
    mod = importlib.import_module(f"kio.schema.{snake}.v{version}.{kind.lower()}")
    return getattr(mod, name + kind)


def _norm(value: Any) -> Any:
    """Plain values with snake_case keys, as kafka-python's to_dict(json=False) gives them."""
    if isinstance(value, dict):
        return {_snake(k): _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _kp_plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _kp_plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_kp_plain(v) for v in obj]
    if isinstance(obj, memoryview | bytearray):
        return bytes(obj)
    if isinstance(obj, uuid.UUID):
        return obj
    return obj


def _same_values(kp: Any, ours: Any, path: str) -> None:
    """Field by field where both name the field (kafka-python renames a few and turns
    authorized-operations bitfields into sets; the byte equality above covers those)."""
    if isinstance(ours, dict) and isinstance(kp, dict):
        for key in ours.keys() & kp.keys():
            _same_values(kp[key], ours[key], f"{path}.{key}")
    elif isinstance(ours, list) and isinstance(kp, list):
        assert len(kp) == len(ours), path
        for i, (a, b) in enumerate(zip(kp, ours, strict=True)):
            _same_values(a, b, f"{path}[{i}]")
    elif not isinstance(kp, set):
        assert kp == ours, path


@pytest.mark.parametrize(("name", "kind", "version"), CASES, ids=[f"{n}{k}-v{v}" for n, k, v in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_oracles_agree(name: str, kind: str, version: int, data: st.DataObject) -> None:
    spec = load(name + kind)
    value = data.draw(struct_strategy(spec.fields, version))
    if name == "ApiVersions" and kind == "Response" and version > 0:
        value["ErrorCode"] = 0  # kafka-python reads any error response in the v0 layout (KIP-511)
    ours = encode(spec, version, value)

    # our walker reads back exactly what we wrote, and re-encodes the walk identically
    walked = walk(spec, version, ours)
    assert walked.end == len(ours)
    assert encode(spec, version, walked, ours) == ours

    # kafka-python 3.x decodes our bytes to the same values and re-encodes them identically
    kp = _kp_class(name, kind).decode(ours, version=version)
    assert bytes(kp.encode()) == ours
    kp_values = _kp_plain(kp.to_dict(json=False))
    ours_values = _norm(walked.to_plain(ours))
    _same_values(kp_values, ours_values, "")

    # kio (second, independent oracle) round-trips our bytes byte for byte
    import io

    from kio.serial import entity_reader, entity_writer

    cls = _kio_class(name, kind, version)
    entity, size = entity_reader(cls)(ours, 0)
    assert size == len(ours)
    buf = io.BytesIO()
    entity_writer(cls)(buf, entity)
    assert buf.getvalue() == ours

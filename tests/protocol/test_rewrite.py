"""Address rewrites splice: the result equals an oracle (kafka-python) re-encode of the same
change, and every byte we do not change (unknown tags, trailing bytes) survives."""

from __future__ import annotations

import importlib
import uuid
from typing import Any

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.primitives import encode_uvarint
from fetchlat.protocol.rewrite import CODEC_MAX_VERSION, ResponseRewriter, cap_api_versions
from fetchlat.protocol.schema import load
from fetchlat.protocol.walker import walk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .specgen import struct_strategy


def advertise(node_id: int, host: str, port: int) -> tuple[str, int]:
    return (f"proxy-{node_id % 1000}.example.com", 20000 + node_id % 1000)


KP = {
    apis.METADATA: ("kafka.protocol.metadata", "MetadataResponse"),
    apis.FIND_COORDINATOR: ("kafka.protocol.metadata", "FindCoordinatorResponse"),
    apis.DESCRIBE_CLUSTER: ("kafka.protocol.admin", "DescribeClusterResponse"),
    apis.FETCH: ("kafka.protocol.consumer", "FetchResponse"),
    apis.PRODUCE: ("kafka.protocol.producer", "ProduceResponse"),
}

CASES = (
    [(apis.METADATA, v) for v in range(0, 14)]
    + [(apis.FIND_COORDINATOR, v) for v in range(0, 7)]
    + [(apis.DESCRIBE_CLUSTER, v) for v in range(0, 3)]
    + [(apis.FETCH, v) for v in range(16, 19)]
    + [(apis.PRODUCE, v) for v in range(10, 14)]
)


def _frame(api_key: int, version: int, body: bytes, corr: int = 7) -> bytes:
    header = corr.to_bytes(4, "big", signed=True)
    if apis.response_header_version(api_key, version) == 1:
        header += b"\x00"
    return header + body


def _kp_rewrite(api_key: int, version: int, body: bytes) -> bytes:
    mod, name = KP[api_key]
    cls = getattr(importlib.import_module(mod), name)
    obj = cls.decode(body, version=version)

    def fix(entry: Any, node_attr: str) -> None:
        node = getattr(entry, node_attr)
        if node >= 0 and entry.host is not None:
            entry.host, entry.port = advertise(node, entry.host, entry.port)

    if api_key == apis.METADATA:
        for b in obj.brokers:
            fix(b, "node_id")
    elif api_key == apis.FIND_COORDINATOR:
        for c in obj.coordinators if version >= 4 else [obj]:
            fix(c, "node_id")
    elif api_key == apis.DESCRIBE_CLUSTER:
        if getattr(obj, "endpoint_type", 1) != 2:
            for b in obj.brokers:
                fix(b, "broker_id")
    else:
        for e in obj.node_endpoints or []:
            fix(e, "node_id")
    return bytes(obj.encode())


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{apis.api_name(k)}-v{v}" for k, v in CASES])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rewrite_equals_oracle_reencode(api_key: int, version: int, data: st.DataObject) -> None:
    spec = apis.table()[api_key].response()
    value = data.draw(struct_strategy(spec.fields, version))
    if "Responses" in value and api_key in (apis.FETCH, apis.PRODUCE):
        value["Responses"] = []  # records are opaque to both sides; the tag is what matters
    body = encode(spec, version, value)
    frame = _frame(api_key, version, body)
    result = ResponseRewriter(advertise).rewrite(api_key, version, frame)
    expected_body = _kp_rewrite(api_key, version, body)
    got = result.body if result.body is not None else frame
    assert got == frame[: len(frame) - len(body)] + expected_body
    assert (result.body is None) == (expected_body == body)


def test_unknown_tags_and_trailing_bytes_survive_a_rewrite() -> None:
    spec = load("MetadataResponse")
    body = encode(spec, 12, {
        "Brokers": [{"NodeId": 1, "Host": "kafka-1.internal", "Port": 9092, "Rack": None}],
        "ClusterId": "c", "ControllerId": 1, "Topics": [],
    })
    # add an unknown tag (tag 42) to the broker entry and one (tag 7) at the top level
    walked = walk(spec, 12, body)
    broker = walked["Brokers"][0]
    unknown_inner = encode_uvarint(1) + encode_uvarint(42) + encode_uvarint(3) + b"abc"
    unknown_top = encode_uvarint(1) + encode_uvarint(7) + encode_uvarint(2) + b"xy"
    body = (body[: broker.end - 1] + unknown_inner + body[broker.end : walked.end - 1] + unknown_top)
    frame = _frame(apis.METADATA, 12, body) + b"\x01\x02\x03"  # and trailing bytes
    out = ResponseRewriter(advertise).rewrite(apis.METADATA, 12, frame).body
    assert out is not None
    again = walk(spec, 12, out, 5)
    b0 = again["Brokers"][0]
    assert (b0["Host"], b0["Port"]) == advertise(1, "", 0)
    assert [(t.tag, bytes(out[t.value_start : t.end])) for t in b0.tags] == [(42, b"abc")]
    assert [(t.tag, bytes(out[t.value_start : t.end])) for t in again.tags] == [(7, b"xy")]
    assert out.endswith(b"\x01\x02\x03")


def test_frames_needing_no_change_are_left_alone() -> None:
    spec = load("MetadataResponse")
    body = encode(spec, 9, {"Brokers": [{"NodeId": 3, "Host": "proxy-3.example.com", "Port": 20003}],
                            "Topics": []})
    assert ResponseRewriter(advertise).rewrite(apis.METADATA, 9, _frame(apis.METADATA, 9, body)).body is None


def test_describe_cluster_controllers_are_not_rewritten() -> None:
    spec = load("DescribeClusterResponse")
    body = encode(spec, 1, {"EndpointType": 2, "Brokers": [{"BrokerId": 1, "Host": "c1", "Port": 9093}]})
    result = ResponseRewriter(advertise).rewrite(apis.DESCRIBE_CLUSTER, 1, _frame(apis.DESCRIBE_CLUSTER, 1, body))
    assert result.body is None and result.learned == []


def test_codec_max_versions_match_the_bundled_specs() -> None:
    for key, cap in CODEC_MAX_VERSION.items():
        api = apis.table()[key]
        assert cap == api.request().valid.hi == api.response().valid.hi, api.name


@pytest.mark.parametrize("version", range(0, 6))
def test_api_versions_capped_and_default_tags_dropped(version: int) -> None:
    spec = load("ApiVersionsResponse")
    value: dict[str, Any] = {
        "ErrorCode": 0,
        "ApiKeys": [
            {"ApiKey": apis.FETCH, "MinVersion": 0, "MaxVersion": 99},
            {"ApiKey": apis.METADATA, "MinVersion": 0, "MaxVersion": 12},
            {"ApiKey": 11, "MinVersion": 0, "MaxVersion": 42},  # JoinGroup: not ours to cap
        ],
        "ThrottleTimeMs": 0,
    }
    body = bytearray(encode(spec, version, value))
    if version >= 3:  # Tansu-style: all four tags present with their defaults
        body = body[:-1] + bytes.fromhex("04" "000101" "0108ffffffffffffffff" "020101" "030100")
    frame = (5).to_bytes(4, "big") + bytes(body)
    out = cap_api_versions(version, frame)
    assert out is not None
    again = walk(spec, version, out, 4)
    assert [(k["ApiKey"], k["MaxVersion"]) for k in again["ApiKeys"]] == [(1, 18), (3, 12), (11, 42)]
    assert again.tags == []
    assert out[:4] == frame[:4]


def test_api_versions_unsupported_version_answer_is_read_as_v0() -> None:
    spec = load("ApiVersionsResponse")
    body = encode(spec, 0, {"ErrorCode": 35, "ApiKeys": [{"ApiKey": apis.API_VERSIONS, "MinVersion": 0,
                                                          "MaxVersion": 9}]})
    out = cap_api_versions(4, (1).to_bytes(4, "big") + body)
    assert out is not None
    assert walk(spec, 0, out, 4)["ApiKeys"][0]["MaxVersion"] == 5  # the codec reads ApiVersions up to v5


def test_tansu_api_versions_from_the_capture_lose_their_default_tags() -> None:
    """The exact frame kcat (librdkafka 2.0.2) cannot parse (docs/proxy.md)."""
    import json
    from pathlib import Path

    path = Path(__file__).parents[1] / "data" / "kcat-apiversions-v3-response.json"
    frame = bytes.fromhex(json.loads(path.read_text())["hex"])
    out = cap_api_versions(3, frame)
    assert out is not None and len(out) < len(frame)
    spec = load("ApiVersionsResponse")
    before, after = walk(spec, 3, frame, 4), walk(spec, 3, out, 4)
    assert after.tags == [] and len(before.tags) == 4
    assert before.to_plain()["ApiKeys"] == after.to_plain()["ApiKeys"]


def test_a_repeated_response_is_rewritten_from_the_cache_with_its_own_correlation_id() -> None:
    rw = ResponseRewriter(advertise)
    body = encode(load("MetadataResponse"), 12, {"Brokers": [{"NodeId": 1, "Host": "kafka-1", "Port": 9092}],
                                                 "Topics": []})
    first = rw.rewrite(apis.METADATA, 12, _frame(apis.METADATA, 12, body, corr=7))
    again = rw.rewrite(apis.METADATA, 12, _frame(apis.METADATA, 12, body, corr=8))
    fresh = ResponseRewriter(advertise).rewrite(apis.METADATA, 12, _frame(apis.METADATA, 12, body, corr=8))
    assert first.body is not None and first.body[:4] == (7).to_bytes(4, "big")
    assert again.body == fresh.body and again.body is not None and again.body[:4] == (8).to_bytes(4, "big")
    assert again.learned == fresh.learned == first.learned and again.learned
    assert len(rw._cache) == 1


@pytest.mark.parametrize(("api_key", "version"), [(apis.SHARE_FETCH, 1), (apis.SHARE_FETCH, 2),
                                                   (apis.SHARE_ACKNOWLEDGE, 1), (apis.SHARE_ACKNOWLEDGE, 2)])
def test_share_responses_name_the_proxys_listeners_for_a_moved_leader(api_key: int, version: int) -> None:
    """KIP-932: a ShareFetch or ShareAcknowledge answer lists the new leader of a partition that
    failed with NOT_LEADER_OR_FOLLOWER in NodeEndpoints (an array, not a tag, in Kafka 4.4's
    v1-v2): the client must reach it through the proxy. Every other field is kept."""
    spec = apis.table()[api_key].response()
    partition = {"PartitionIndex": 0, "ErrorCode": 6, "ErrorMessage": None,
                 "CurrentLeader": {"LeaderId": 2, "LeaderEpoch": 7}}
    if api_key == apis.SHARE_FETCH:
        partition |= {"AcknowledgeErrorCode": 0, "AcknowledgeErrorMessage": None, "Records": None,
                      "AcquiredRecords": []}
    value = {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "AcquisitionLockTimeoutMs": 30000,
             "Responses": [{"TopicId": uuid.UUID(int=5), "Partitions": [partition]}],
             "NodeEndpoints": [{"NodeId": 2, "Host": "kafka-2.internal", "Port": 9092, "Rack": "b"}]}
    frame = _frame(api_key, version, encode(spec, version, value))
    result = ResponseRewriter(advertise).rewrite(api_key, version, frame)
    assert result.body is not None and [b.node_id for b in result.learned] == [2]
    msg = walk(spec, version, result.body, len(frame) - len(encode(spec, version, value)))
    (ep,) = msg["NodeEndpoints"]
    assert (ep["Host"], ep["Port"]) == advertise(2, "kafka-2.internal", 9092)
    assert msg["Responses"][0]["Partitions"][0]["CurrentLeader"]["LeaderId"] == 2
    assert ResponseRewriter(advertise).wants(api_key, version)

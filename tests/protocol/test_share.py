"""The ShareFetch push parsers (``share.py``, every version Kafka 4.x speaks) against the
spec-driven walker for every field they read, and kafka-python's record-batch reader for the
batch headers; generated messages fed in random chunk splits, and the direct twin alike."""

from __future__ import annotations

import pytest
from fetchlat.protocol import share, share_now
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.inflight import observed
from fetchlat.protocol.schema import load
from fetchlat.protocol.walker import walk
from hypothesis import given
from hypothesis import strategies as st

from .specgen import struct_strategy
from .test_fetch_produce import SETTINGS, cuts_for, feed_split, oracle_stats, with_records

VERSIONS = range(share.MIN_VERSION, share.MAX_VERSION + 1)


def test_every_declared_version_is_decoded() -> None:
    valid = load("ShareFetchRequest").valid
    lo, hi = valid.lo, valid.hi
    assert (lo, hi) == (share.MIN_VERSION, share.MAX_VERSION)
    assert all(observed(78, v) for v in VERSIONS) and not observed(78, hi + 1)


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(data=st.data())
def test_share_fetch_request(version: int, data: st.DataObject) -> None:
    spec = load("ShareFetchRequest")
    body = encode(spec, version, data.draw(struct_strategy(spec.fields, version)))
    info = feed_split(share.parse_request(version), body, cuts_for(data, len(body)))
    assert share_now.parse_request_now(body, version) == info
    ref = walk(spec, version, body).to_plain(body)
    assert info.share and info.replica_id == -1
    assert (info.max_wait_ms, info.min_bytes, info.max_bytes, info.session_epoch) == (
        ref["MaxWaitMs"], ref["MinBytes"], ref["MaxBytes"], ref["ShareSessionEpoch"])
    assert [(p.topic_id, p.partition, p.fetch_offset, p.partition_max_bytes) for p in info.partitions] == [
        (t["TopicId"], p["PartitionIndex"], -1, p.get("PartitionMaxBytes", -1))
        for t in ref["Topics"] or [] for p in t["Partitions"] or []]
    assert list(info.forgotten) == [(None, t["TopicId"], p) for t in ref["ForgottenTopicsData"] or []
                                    for p in t["Partitions"] or []]
    assert info.acknowledgements == sum(len(p["AcknowledgementBatches"] or []) for t in ref["Topics"] or []
                                        for p in t["Partitions"] or [])


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(data=st.data())
def test_share_fetch_response(version: int, data: st.DataObject) -> None:
    spec = load("ShareFetchResponse")
    body = encode(spec, version, with_records(data.draw(struct_strategy(spec.fields, version)), data))
    info = feed_split(share.parse_response(version), body, cuts_for(data, len(body)))
    assert share_now.parse_response_now(body, version) == info
    ref = walk(spec, version, body).to_plain(body)
    assert (info.throttle_time_ms, info.error_code) == (ref["ThrottleTimeMs"], ref["ErrorCode"])
    assert info.node_endpoints == bool(ref["NodeEndpoints"])

    def acquired(p: dict) -> tuple[int, int]:
        ranges = [(a["FirstOffset"], a["LastOffset"]) for a in p["AcquiredRecords"] or []]
        return (min((lo for lo, _ in ranges if lo >= 0), default=-1), sum(hi - lo + 1 for lo, hi in ranges if hi >= lo))

    assert [(p.topic_id, p.partition, p.error_code, p.batches, (p.acquired_first, p.acquired))
            for p in info.partitions] == [
        (t["TopicId"], p["PartitionIndex"], p["ErrorCode"], oracle_stats(p["Records"]), acquired(p))
        for t in ref["Responses"] or [] for p in t["Partitions"] or []]

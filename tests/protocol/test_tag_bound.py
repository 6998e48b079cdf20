"""A tag buffer that claims more tags than any real message holds (``stream.MAX_TAGS``) is not
read, tag by tag, on either parser: the message is reported as not decoded at its count, whether
the count lies or the tags are all there. Up to the bound, every tag is read."""

from __future__ import annotations

import struct

import pytest
from fetchlat.protocol import fetch, fetch_now, stream
from fetchlat.protocol.primitives import encode_uvarint
from fetchlat.protocol.stream import Feeder, run_direct


def fetch_v12_body(partition_tags: int, present: int | None = None) -> bytes:
    """A Fetch v12 answer's body (after its header) of one topic and one partition whose tag
    buffer claims ``partition_tags`` tags, ``present`` of them there (all by default)."""
    b = bytearray(struct.pack(">ihi", 0, 0, 0))
    b += encode_uvarint(2) + encode_uvarint(2) + b"t"  # one topic "t"
    b += encode_uvarint(2) + struct.pack(">ihqqq", 0, 0, 10, 10, 0)  # one partition
    b += encode_uvarint(1) + struct.pack(">i", -1) + encode_uvarint(1)  # no aborted, no replica, empty records
    b += encode_uvarint(partition_tags)
    for tag in range(partition_tags if present is None else present):
        b += encode_uvarint(tag) + encode_uvarint(0)
    b += encode_uvarint(0) + encode_uvarint(0)  # the topic's tags, the answer's
    return bytes(b)


def both(body: bytes) -> tuple[tuple[object, str | None], tuple[object, str | None]]:
    """The direct twin over the whole body, and the streaming parser fed it in 7-byte pieces."""
    direct = run_direct(lambda b: fetch_now.parse_response_now(b, 12), body)
    feeder = Feeder(fetch.parse_response(12))
    for i in range(0, len(body), 7):
        feeder.feed(body[i:i + 7])
    return direct, (feeder.finish(), feeder.error)


def test_a_buffer_up_to_the_bound_is_read_whole() -> None:
    (info, error), (streamed, s_error) = both(fetch_v12_body(stream.MAX_TAGS))
    assert error is None and s_error is None
    assert info == streamed and len(info.partitions) == 1


@pytest.mark.parametrize("present", [None, 10])
def test_a_buffer_past_the_bound_is_refused_at_its_count(present: int | None) -> None:
    (info, error), (streamed, s_error) = both(fetch_v12_body(stream.MAX_TAGS + 1, present))
    assert info is None and streamed is None
    assert error == s_error == f"a tag buffer of {stream.MAX_TAGS + 1} tags is beyond any real message " \
                               f"(at most {stream.MAX_TAGS} are read)"


def test_a_lying_count_is_refused_before_a_tag_is_looked_for() -> None:
    (_, error), (_, s_error) = both(fetch_v12_body(2 ** 32 - 1, present=0))
    assert error == s_error and error is not None and error.startswith(f"a tag buffer of {2 ** 32 - 1} tags")

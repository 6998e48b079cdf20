"""How each response is handled: the table of ``responses.response_mode``, one named row each."""

from __future__ import annotations

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.responses import HOLD_LIMIT_BYTES, ResponseMode, response_mode

BIG = HOLD_LIMIT_BYTES + 1
ROWS = [
    # name, api key, size, request decoded, rewriter wants it, answers SaslHandshake v0 -> mode
    ("metadata_without_rewrite_passes", apis.METADATA, 100, False, False, False, ResponseMode.PASS),
    ("fetch_parsed_after_the_write", apis.FETCH, 100, True, False, False, ResponseMode.DEFER),
    ("produce_parsed_after_the_write", apis.PRODUCE, 100, True, False, False, ResponseMode.DEFER),
    ("big_fetch_without_rewrite_streams", apis.FETCH, BIG, True, False, False, ResponseMode.DEFER),
    ("fetch_of_an_unknown_version_passes", apis.FETCH, 100, False, False, False, ResponseMode.PASS),
    ("metadata_to_rewrite_is_held", apis.METADATA, 100, False, True, False, ResponseMode.HOLD),
    ("api_versions_to_cap_is_held", apis.API_VERSIONS, 100, False, True, False, ResponseMode.HOLD),
    ("small_fetch_v16_to_rewrite_is_held", apis.FETCH, 100, True, True, False, ResponseMode.HOLD),
    ("big_fetch_v16_streams_with_its_tail_held", apis.FETCH, BIG, True, True, False, ResponseMode.STREAM_HELD_TAIL),
    ("big_fetch_not_decoded_is_held_whole", apis.FETCH, BIG, False, True, False, ResponseMode.HOLD),
    ("big_produce_to_rewrite_is_held", apis.PRODUCE, BIG, True, True, False, ResponseMode.HOLD),
    ("sasl_handshake_v0_is_held", apis.SASL_HANDSHAKE, 100, False, False, True, ResponseMode.HOLD),
    ("share_fetch_to_rewrite_is_held", apis.SHARE_FETCH, 100, False, True, False, ResponseMode.HOLD),
    ("big_share_fetch_passes_unheld", apis.SHARE_FETCH, BIG, False, True, False, ResponseMode.PASS),
    ("share_acknowledge_is_held", apis.SHARE_ACKNOWLEDGE, BIG, False, True, False, ResponseMode.HOLD),
]


@pytest.mark.parametrize(("name", "key", "size", "decoded", "rewrite", "sasl", "mode"), ROWS, ids=[r[0] for r in ROWS])
def test_response_mode(name: str, key: int, size: int, decoded: bool, rewrite: bool, sasl: bool,
                       mode: ResponseMode) -> None:
    assert response_mode(api_key=key, size=size, decoded=decoded, rewrite=rewrite, sasl_handshake=sasl) is mode

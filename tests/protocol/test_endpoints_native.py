"""The core's rule for a Fetch or Produce answer a proxy away from its brokers holds whole
(``native/src/endpoints.rs``): it goes on unchanged unless its top-level tag buffer holds
``NodeEndpoints`` (KIP-951), or the core cannot walk it. Held to the Python rewriter on any
answer the specs allow: the core never sends on an answer the rewriter would change."""

from __future__ import annotations

from typing import Any

import pytest
from fetchlat import native
from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .specgen import struct_strategy
from .test_rewrite import _frame, advertise

CORE = native.core()
pytestmark = pytest.mark.skipif(CORE is None, reason=f"native core not loaded: {native.reason()}")

CASES = [(apis.FETCH, v) for v in range(4, 19)] + [(apis.PRODUCE, v) for v in range(3, 14)]


def _answer(api_key: int, version: int, value: dict[str, Any]) -> bytes:
    """The frame of an answer, size prefix first, as the core holds it."""
    frame = _frame(api_key, version, encode(apis.table()[api_key].response(), version, value))
    return len(frame).to_bytes(4, "big") + frame


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{apis.api_name(k)}-v{v}" for k, v in CASES])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_answer_goes_to_python_exactly_when_it_names_brokers(api_key: int, version: int,
                                                                 data: st.DataObject) -> None:
    from fetchlat.protocol.rewrite import ResponseRewriter

    spec = apis.table()[api_key].response()
    value = data.draw(struct_strategy(spec.fields, version))
    frame = _answer(api_key, version, value)
    assert CORE is not None
    to_python = CORE.names_brokers(frame, api_key, version)
    named = bool(value.get("NodeEndpoints"))  # the tag present (an empty one, the default, is not written)
    assert to_python == named
    if not to_python:  # sent on as it came: the rewriter must change nothing
        assert ResponseRewriter(advertise).rewrite(api_key, version, memoryview(frame)[4:]).body is None


@pytest.mark.parametrize(("api_key", "version"), [(apis.FETCH, 16), (apis.FETCH, 18), (apis.PRODUCE, 10),
                                                  (apis.PRODUCE, 13)])
def test_an_answer_the_core_cannot_walk_goes_to_python(api_key: int, version: int) -> None:
    value: dict[str, Any] = {"NodeEndpoints": None}
    frame = _answer(api_key, version, value)
    assert CORE is not None
    assert not CORE.names_brokers(frame, api_key, version)
    for cut in range(8, len(frame)):  # cut anywhere: not whole, so Python decides
        assert CORE.names_brokers(frame[:cut], api_key, version), cut
    # a top-level count of tags the bytes cannot hold
    assert frame[-1] == 0
    assert CORE.names_brokers(frame[:-1] + b"\x7f", api_key, version)


def test_answers_before_kip_951_never_go_to_python() -> None:
    assert CORE is not None
    for api_key, version in ((apis.FETCH, 15), (apis.PRODUCE, 9)):
        frame = _answer(api_key, version, {})
        assert not CORE.names_brokers(frame, api_key, version)
        assert not CORE.names_brokers(frame[:9], api_key, version)  # not even walked

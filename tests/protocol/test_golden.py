"""The golden frames of all four clients (plus admin and SASL runs) decode exactly, and whole
captured conversations replay through the connection state machine."""

from __future__ import annotations

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.events import RequestSeen, ResponseSeen
from fetchlat.protocol.headers import parse_request_header, response_body_start
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.walker import walk

from testkit.captures import RUNS, conversations, frames

# librdkafka #5049 (docs/proxy.md): its Metadata v12 "all topics" request leaves an int32
# placeholder where a compact null belongs, so the intended "01 00 00" trails the message.
LIBRDKAFKA_5049_TAIL = b"\x00\x00\x00\x00\x01\x00\x00"


@pytest.mark.parametrize("run", RUNS)
def test_every_captured_frame_decodes(run: str) -> None:
    sasl_raw = set()
    seen = 0
    for f in frames(run):
        if f.api_key is None or f.api_key < 0 or (f.conn, f.direction) in sasl_raw:
            continue
        api = apis.table()[f.api_key]
        if f.direction == "req":
            h = parse_request_header(f.body)
            assert (h.api_key, h.api_version) == (f.api_key, f.api_version)
            msg = walk(api.request(), f.api_version, f.body, h.body_start)
        else:
            msg = walk(api.response(), f.api_version, f.body, response_body_start(f.api_key, f.api_version, f.body))
        trailing = len(f.body) - msg.end
        known = f.api_key == apis.METADATA and f.direction == "req" and f.body.endswith(LIBRDKAFKA_5049_TAIL)
        assert trailing == (3 if known else 0), (run, f)
        seen += 1
    assert seen > 10


def identity(node_id: int, host: str, port: int) -> tuple[str, int]:
    return (host, port)


@pytest.mark.parametrize("run", [r for r in RUNS if "failure" not in r])
def test_captured_conversations_replay(run: str) -> None:
    for conn_id, conv in conversations(run).items():
        codec = KafkaConnection(rewriter=ResponseRewriter(identity))
        t = 0
        requests = responses = 0
        for f in conv:
            t += 1000
            if f.direction == "req":
                events = codec.receive_from_client(f.wire, t)
                seen = [e for e in events if isinstance(e, RequestSeen)]
                assert [(e.api_key, e.api_version) for e in seen] == [(f.api_key, f.api_version)]
                requests += seen[0].expects_response
            else:
                out, events = codec.receive_from_broker(f.wire, t)
                done = [e for e in events if isinstance(e, ResponseSeen)]
                assert [(e.api_key, e.correlation_id) for e in done] == [
                    (f.api_key, int.from_bytes(f.body[:4], "big", signed=True))
                ]
                forwarded = b"".join(bytes(s) for s in out)
                if f.api_key != apis.API_VERSIONS:  # identity advertise: nothing else changes
                    assert forwarded == f.wire, (run, conn_id, f.api_key)
                responses += 1
        # a capture may end with requests outstanding (a parked fetch when the client left)
        assert len(codec.in_flight) == requests - responses, (run, conn_id)


def test_header_rules_table() -> None:
    # (api key, version) -> (request header version, response header version)
    table = {
        (apis.API_VERSIONS, 0): (1, 0), (apis.API_VERSIONS, 3): (2, 0), (apis.API_VERSIONS, 4): (2, 0),
        (apis.FETCH, 11): (1, 0), (apis.FETCH, 12): (2, 1), (apis.FETCH, 16): (2, 1),
        (apis.PRODUCE, 8): (1, 0), (apis.PRODUCE, 9): (2, 1),
        (apis.METADATA, 8): (1, 0), (apis.METADATA, 9): (2, 1),
        (apis.FIND_COORDINATOR, 2): (1, 0), (apis.FIND_COORDINATOR, 3): (2, 1),
        (apis.DESCRIBE_CLUSTER, 0): (2, 1),
        (apis.SASL_HANDSHAKE, 1): (1, 0), (apis.SASL_AUTHENTICATE, 2): (2, 1),
        (apis.CONTROLLED_SHUTDOWN, 0): (0, 0),
    }
    for (key, ver), (req, resp) in table.items():
        assert apis.request_header_version(key, ver) == req, (key, ver)
        assert apis.response_header_version(key, ver) == resp, (key, ver)


def test_client_id_is_a_classic_string_even_in_header_v2() -> None:
    body = bytes.fromhex("0012000300000001000772646b61666b6100")  # ApiVersions v3, client "rdkafka"
    h = parse_request_header(body)
    assert (h.client_id, h.body_start) == ("rdkafka", len(body))


def test_unknown_api_keys_share_one_label() -> None:
    assert apis.api_name(apis.FETCH) == "Fetch"
    assert apis.api_name(31337) == apis.api_name(-7) == "unknown"

"""The captures of four real clients (tests/data/captures, made with tshark on loopback) read
through ``fetchlat pcap``'s road: every conversation's bytes, put back in order, are exactly
the frames the logging relay saw (``.frames.jsonl``), and the proxy core measures every
exchange of them, with the clients' correlation ids."""

from __future__ import annotations

import subprocess
from collections import defaultdict

import pytest
from fetchlat.capture.flows import COMPLETE, OPEN_AT_END, Flow
from fetchlat.capture.run import feed
from fetchlat.capture.source import Capture
from fetchlat.protocol import apis

from testkit.captures import CAPTURES, conversations
from testkit.pcap_files import table

PORT = 39093
RUNS = ["admin", "aiokafka", "confluent", "kafkapython", "kcat"]


def split(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 4 <= len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    assert pos == len(data), "the stream ends inside a frame"
    return out


def read(run: str) -> tuple[dict[int, dict[bool, bytearray]], list[Flow], object]:
    streams: dict[int, dict[bool, bytearray]] = defaultdict(lambda: {True: bytearray(), False: bytearray()})
    ended: list[Flow] = []

    def tap(flow: Flow, to_broker: bool, chunk: bytes) -> None:
        streams[flow.conn_id][to_broker] += chunk

    flows, rows = table({PORT}, tap=tap, on_end=ended.append)
    feed(Capture(str(CAPTURES / f"{run}.pcap")), flows)
    flows.close_all()
    return streams, ended, rows


@pytest.mark.parametrize("run", RUNS)
def test_a_capture_reads_back_as_the_frames_the_relay_saw(run: str) -> None:
    streams, ended, _ = read(run)
    expected = conversations(run)
    assert len(streams) == len(expected)
    for conn, frames in expected.items():  # the relay numbered connections as they came: so do flows
        got = streams[conn]
        assert split(bytes(got[True])) == [f.body for f in frames if f.direction == "req"]
        responses = [f for f in frames if f.direction == "resp"]
        got_resp = split(bytes(got[False]))
        assert len(got_resp) == len(responses)
        for mine, theirs in zip(got_resp, responses, strict=True):
            if run == "kcat" and theirs.api_key == apis.API_VERSIONS:
                continue  # the relay rewrote these for librdkafka 2.0 (the README): the capture has the rewrite
            assert mine == theirs.body
    assert {f.ended for f in ended} <= {COMPLETE, OPEN_AT_END}


@pytest.mark.parametrize("run", RUNS)
def test_every_exchange_of_a_capture_is_measured_with_its_correlation_id(run: str) -> None:
    _, _, rows = read(run)
    expected = conversations(run)
    answered = {(conn, int.from_bytes(f.body[4:8], "big", signed=True), f.api_key)
                for conn, frames in expected.items() for f in frames if f.direction == "req"
                and any(r.direction == "resp" and r.body[:4] == f.body[4:8] for r in frames)}
    got = {(r["conn_id"], r["correlation_id"], next(k for k, a in apis.table().items() if a.name == r["api"]))
           for r in rows.exchanges()}  # type: ignore[attr-defined]
    assert got == answered
    fetches = [r for r in rows.exchanges() if r["api"] == "Fetch"]  # type: ignore[attr-defined]
    assert (run == "admin" or fetches) and all(r["total_ns"] > 0 and r["outcome"] for r in fetches)


@pytest.mark.integration  # needs Debian's tshark (make deps installs it)
@pytest.mark.parametrize("run", RUNS)
def test_wiresharks_kafka_dissector_sees_the_same_exchanges(run: str) -> None:
    """An independent oracle: tshark's Kafka dissector, on the same capture, finds the same
    answered requests (api key, correlation id) in the same conversations."""
    out = subprocess.run(["tshark", "-r", str(CAPTURES / f"{run}.pcap"), "-d", f"tcp.port=={PORT},kafka", "-Y", "kafka",
                          "-T", "fields", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "kafka.request_key",
                          "-e", "kafka.correlation_id"], capture_output=True, text=True, check=True, timeout=60).stdout
    requests: dict[int, dict[int, int]] = defaultdict(dict)
    answered: set[tuple[int, int]] = set()
    for line in out.splitlines():
        stream, sport, key, corr = line.split("\t")
        for c in corr.split(","):  # one line per packet: a packet may carry several frames
            if int(sport) == PORT:
                answered.add((int(stream), int(c)))
            elif key:
                requests[int(stream)][int(c)] = int(key.split(",")[corr.split(",").index(c)])
    theirs = sorted(sorted((requests[s][c], c) for s2, c in answered if s2 == s and c in requests[s])
                    for s in requests)
    _, _, rows = read(run)
    by_conn: dict[int, list[tuple[int, int]]] = defaultdict(list)
    names = {a.name: k for k, a in apis.table().items()}
    for r in rows.exchanges():  # type: ignore[attr-defined]
        by_conn[r["conn_id"]].append((names[r["api"]], r["correlation_id"]))
    assert sorted(sorted(v) for v in by_conn.values()) == [t for t in theirs if t]

"""Bounded by design: a sidecar lives for months while clients come and go. 100 000 connections,
each with a client id never seen before, go through the real proxy (traces on) to Tansu: an
ApiVersions, a Metadata and a one-record Produce each, then the connection closes. After a
warm-up of 10 000 (every per-client cache fills: the client-id memo, the metric children), the
proxy's resident memory and open files must not grow with the 90 000 that follow (sampled every
10 000, each time the proxy holds no connection). The same for 10 000 topics created, used and
deleted. Long (``make test-long``): about two minutes each here."""

from __future__ import annotations

import asyncio
import statistics
import struct
import time
import uuid
from pathlib import Path

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame
from fetchlat.protocol.headers import response_body_start
from fetchlat.protocol.walker import walk

from testkit.frames import record_batch
from testkit.procfs import open_fds, rss_mb

from .conftest import Broker, ProxyProc, start_proxy, stop_proxy, wait_port

pytestmark = [pytest.mark.integration, pytest.mark.long]

STEP = 10_000  # connections between samples; the first step is the warm-up
STEPS = 10
PARALLEL = 32
TOPIC = "bounded"


BATCH = record_batch()


def frames(client_id: str) -> list[bytes]:
    def enc(key: int, v: int, corr: int, value: dict[str, object]) -> bytes:
        return request_frame(key, v, corr, client_id, encode(apis.table()[key].request(), v, value))

    return [
        enc(apis.API_VERSIONS, 3, 1, {"ClientSoftwareName": "bounded", "ClientSoftwareVersion": "1"}),
        enc(apis.METADATA, 12, 2, {"Topics": [{"Name": TOPIC, "TopicId": uuid.UUID(int=0)}],
                                   "AllowAutoTopicCreation": True}),
        enc(apis.PRODUCE, 9, 3, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 5000, "TopicData": [
            {"Name": TOPIC, "PartitionData": [{"Index": 0, "Records": BATCH}]}]}),
    ]


async def churn(port: int, first: int, count: int) -> int:
    """``count`` connections, ``PARALLEL`` at a time, client ids ``churn-<n>``; answers read."""
    done = 0
    ids = iter(range(first, first + count))

    async def worker() -> None:
        nonlocal done
        for n in ids:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            for f in frames(f"churn-{n}"):
                w.write(f)
                size = struct.unpack(">i", await r.readexactly(4))[0]
                await r.readexactly(size)
            w.close()
            await w.wait_closed()
            done += 1

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(PARALLEL))), timeout=600)
    return done


def drained(proxy: ProxyProc, timeout_s: float = 10.0, staying: int = 0) -> None:
    """Until the proxy holds no client connection but ``staying`` (the last ones closing as the step ends)."""
    deadline = time.monotonic() + timeout_s
    while proxy.health()["connections"] > staying and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.health()["connections"] <= staying


def assert_flat(samples: list[tuple[int, float, int]], health: dict[str, object], text: str) -> None:
    """RSS moves by a few MB from sample to sample (the allocator, trace batches): the median of
    samples 2-4 against the median of the last three; open files within a few of the first
    sample's (trace files rotate: a few come and go); no trace row dropped; still ready."""
    early = statistics.median(s[1] for s in samples[1:4])
    late = statistics.median(s[1] for s in samples[-3:])
    assert late - early < 8.0, samples
    assert max(s[2] for s in samples[1:]) <= samples[0][2] + 4, samples
    assert "fetchlat_trace_rows_dropped_total 0.0" in text
    assert health.get("ready")


def test_a_hundred_thousand_clients_leave_nothing_behind(tansu: Broker, tmp_path: Path) -> None:
    proxy = start_proxy(tansu.bootstrap, tmp_path, "--trace-dir", str(tmp_path / "traces"))
    samples: list[tuple[int, float, int]] = []  # (clients so far, RSS MB, open files)
    try:
        port = proxy.listen_port + 1 + 111  # Tansu's own listener on the proxy
        wait_port(port)
        pid = proxy.proc.pid
        for step in range(STEPS):
            assert asyncio.run(churn(port, step * STEP, STEP)) == STEP
            drained(proxy)
            samples.append(((step + 1) * STEP, rss_mb(pid), open_fds(pid)))
        health = proxy.health()
        text = proxy.metrics()
    finally:
        stop_proxy(proxy)
    print("clients, RSS MB, open files:", samples)
    # a leak of 150 bytes a client would add 9 MB between the early and the late samples
    assert_flat(samples, health, text)


TOPIC_STEP = 1_000  # topics between samples; the first step is the warm-up
TOPIC_STEPS = 10
TOPIC_BATCH = 100  # created and deleted together


async def topic_round(port: int, names: list[str]) -> int:
    """Each topic (created already): Metadata (the proxy learns its id), a one-record Produce, a
    Fetch by topic id of that record; returns the number answered without an error."""
    ok = 0

    async def one(name: str) -> None:
        nonlocal ok
        r, w = await asyncio.open_connection("127.0.0.1", port)
        try:
            def enc(key: int, v: int, corr: int, value: dict[str, object]) -> bytes:
                return request_frame(key, v, corr, f"topics-{name}", encode(apis.table()[key].request(), v, value))

            async def call(key: int, v: int, corr: int, value: dict[str, object]) -> dict[str, object]:
                w.write(enc(key, v, corr, value))
                size = struct.unpack(">i", await r.readexactly(4))[0]
                body = await r.readexactly(size)
                return walk(apis.table()[key].response(), v, body, response_body_start(key, v, body))  # type: ignore[no-any-return]

            md = await call(apis.METADATA, 12, 1, {"Topics": [{"Name": name, "TopicId": uuid.UUID(int=0)}],
                                                    "AllowAutoTopicCreation": False})
            tid = md["Topics"][0]["TopicId"]  # type: ignore[index]
            await call(apis.PRODUCE, 9, 2, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 5000, "TopicData": [
                {"Name": name, "PartitionData": [{"Index": 0, "Records": BATCH}]}]})
            fetched = await call(apis.FETCH, 13, 3, {  # by topic id; the record is there: answered at once
                "ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0,
                "SessionId": 0, "SessionEpoch": -1, "Topics": [{"TopicId": tid, "Partitions": [
                    {"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0, "LastFetchedEpoch": -1,
                     "LogStartOffset": -1, "PartitionMaxBytes": 1 << 20}]}],
                "ForgottenTopicsData": [], "RackId": ""})
            if fetched["Responses"][0]["Partitions"][0]["ErrorCode"] == 0:  # type: ignore[index]
                ok += 1
        finally:
            w.close()
            await w.wait_closed()

    await asyncio.wait_for(asyncio.gather(*(one(n) for n in names)), timeout=120)
    return ok


def test_ten_thousand_topics_created_and_deleted_leave_nothing_behind(tansu: Broker, tmp_path: Path) -> None:
    """10 000 topics go through one proxy (traces on): created (through the proxy), each one's
    id learned from Metadata, written to, fetched by id, then deleted, a hundred at a time. After
    the first 1 000 (the warm-up), the proxy's memory must not grow with the 9 000 that follow:
    the proxy asks for every topic each ``topic_refresh_s``, and what it held of the topics
    the answer no longer names (ids, leaders, each partition's state) goes."""
    from confluent_kafka.admin import AdminClient, NewTopic

    cfg = tmp_path / "refresh.yaml"
    cfg.write_text("topic_refresh_s: 2\n")  # the default is 300 s: this run deletes a topic every 20 ms
    proxy = start_proxy(tansu.bootstrap, tmp_path, "--trace-dir", str(tmp_path / "traces"), "--config", str(cfg))
    samples: list[tuple[int, float, int]] = []  # (topics so far, RSS MB, open files)
    answered = 0
    try:
        port = proxy.listen_port + 1 + 111  # Tansu's own listener on the proxy
        wait_port(port)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
        pid = proxy.proc.pid
        for step in range(TOPIC_STEPS):
            for batch in range(TOPIC_STEP // TOPIC_BATCH):
                first = step * TOPIC_STEP + batch * TOPIC_BATCH
                names = [f"topic-churn-{n}" for n in range(first, first + TOPIC_BATCH)]
                for f in admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1)
                                              for n in names]).values():
                    f.result(timeout=60)
                answered += asyncio.run(topic_round(port, names))
                for f in admin.delete_topics(names).values():
                    f.result(timeout=60)
            drained(proxy, staying=2)  # the admin client's own connections stay
            time.sleep(2.5)  # one topic refresh (2 s) after the last deletes
            samples.append(((step + 1) * TOPIC_STEP, rss_mb(pid), open_fds(pid)))
        health = proxy.health()
        text = proxy.metrics()
    finally:
        stop_proxy(proxy)
    print("topics, RSS MB, open files:", samples)
    assert answered == TOPIC_STEP * TOPIC_STEPS
    assert_flat(samples, health, text)  # a leak of 1 KB a topic would add 6 MB

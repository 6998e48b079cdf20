"""SASL_SSL through a TLS fetchlat to Apache Kafka, re-authentication included (KIP-368).

A single Kafka 4.4 node whose listener speaks SASL_PLAINTEXT (SCRAM-SHA-512 and PLAIN), with
``connections.max.reauth.ms`` of a few seconds, behind a fetchlat with a TLS certificate: its
sidecar, or a central proxy (away from it: the broker advertises itself, and the proxy rewrites
its address to the proxy's own listener for it). Clients speak SASL_SSL to fetchlat, which ends
TLS and passes the SASL exchange through to the broker. A producer (SCRAM) and a consumer
(PLAIN) run for a while, so that every connection they keep re-authenticates on the same
connection several times, after its hand-over to the native core's relay (``relay: auto``: the
TLS session is the core's from the first byte) and, for the sidecar, on the event loop
(``relay: off``). Every record arrives, the broker drops no connection for an expired session,
the re-authentications cross the proxy and are counted, and no password, SASL token or record
reaches the proxy's DEBUG log, its traces or its metrics."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fetchlat import native
from fetchlat.embedded.kafka import free_port
from fetchlat.embedded.ports import free_port_block
from fetchlat.embedded.proxy import ProxyProcess

from testkit import sasl
from testkit.certs import Certs, make_certs

from .test_model_live import samples
from .test_security import trace_cells

pytestmark = pytest.mark.integration

REAUTH_MS = 3000
RUN_S = 10.0
SECRETS = (sasl.USER[1].encode(), sasl.ADMIN[1].encode(), b"VALUE-MARKER-77")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _total(p: object, name: str, **labels: str) -> float:
    return sum(v for k, v in samples(p, name).items()  # type: ignore[arg-type]
               if all(dict(k).get(a) == b for a, b in labels.items()))


def _create(bootstrap: str, conf: dict[str, object], topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(timeout=30)


def _consume(bootstrap: str, conf: dict[str, object], topic: str, want: int, until: float, got: list[bytes]) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, **conf, "group.id": f"{topic}-g", "client.id": f"{topic}-c",
                  "fetch.wait.max.ms": 200, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    while len(got) < want and time.monotonic() < until:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()


@pytest.mark.skipif(native.core() is None or not hasattr(native.core().Relay, "front"),
                    reason=f"native core without TLS: {native.reason()}")
@contextlib.contextmanager
def _fronted(tmp_path: Path, placement: str, args: list[str]) -> Iterator[tuple[ProxyProcess, str]]:
    """A SASL Kafka node behind fetchlat as ``placement`` (its sidecar, or a central proxy whose
    listener for node 0 is the port after its bootstrap's): the proxy and the bootstrap."""
    from fetchlat.embedded import kafka, proxy

    sidecar = placement == "sidecar"
    with kafka.cluster(tmp_path / "kafka", brokers=1, sidecars=sidecar, settings=sasl.broker_settings(REAUTH_MS),
                       format_args=sasl.format_args(), sidecar_args=args) as c:
        if sidecar:
            yield c.sidecars[0], c.bootstrap
            return
        base = free_port_block(0, 1)
        central = proxy.start(["--upstream", c.nodes[0].bootstrap, *args], listen_port=base,
                              metrics_port=free_port(), log_path=tmp_path / "central.log")
        try:
            central.wait_ready(30)
            yield central, central.bootstrap
        finally:
            central.stop()


@pytest.mark.parametrize(("placement", "relay"), [("sidecar", "auto"), ("sidecar", "off"), ("central", "auto")])
def test_sasl_ssl_through_a_tls_proxy_reauthenticates_on_live_connections(tmp_path: Path, certs: Certs,
                                                                          placement: str, relay: str) -> None:
    from confluent_kafka import Producer

    traces = tmp_path / "traces"
    args = ["--relay", relay, "--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key),
            "--log-level", "DEBUG", "--trace-dir", str(traces), "--trace-rotate-s", "1"]
    with _fronted(tmp_path, placement, args) as (side, b):
        scram, plain = sasl.client_conf(certs, "SCRAM-SHA-512"), sasl.client_conf(certs, "PLAIN")
        topic = f"sasl-{placement}-{relay}-{uuid.uuid4().hex[:6]}"
        _create(b, scram, topic)
        n = int(RUN_S / 0.1)
        got: list[bytes] = []
        consumer = threading.Thread(target=_consume, args=(b, plain, topic, n, time.monotonic() + RUN_S + 20, got))
        consumer.start()
        failed: list[str] = []
        p = Producer({"bootstrap.servers": b, **scram, "linger.ms": 0, "acks": "all", "client.id": f"{topic}-p"})
        try:
            for i in range(n):  # a record every 100 ms: each connection lives through several sessions
                p.produce(topic, value=b"VALUE-MARKER-77-%d" % i,
                          on_delivery=lambda err, _m: failed.append(str(err)) if err is not None else None)
                p.poll(0)
                time.sleep(0.1)
            assert p.flush(30) == 0
        finally:
            consumer.join(40)
        metrics = side.metrics()
        handshakes = _total(side, "fetchlat_requests_total", api="SaslHandshake")
        connections = _total(side, "fetchlat_connections_total")
        handovers = _total(side, "fetchlat_relay_handovers_total")
        dropped = _total(side, "fetchlat_upstream_disconnects_total")
        rewritten = _total(side, "fetchlat_rewritten_responses_total", api="Metadata")
        time.sleep(2.5)  # the proxy's trace files close every second
    assert not failed, failed[:3]
    assert sorted(got) == sorted(b"VALUE-MARKER-77-%d" % i for i in range(n))
    # each connection authenticated once when it opened; the rest are re-authentications on live
    # connections (the producer's and the consumer's: ~RUN_S / REAUTH_MS each at least)
    assert handshakes >= connections + 4, (handshakes, connections)
    assert dropped == 0, "the broker closed a connection (a session expired unrenewed?)"
    if placement == "central":  # the clients reached the broker through the proxy's own listener
        assert rewritten >= 1, rewritten
    if relay == "auto":
        assert handovers >= 2, handovers  # the long-lived connections were the core's when they re-authenticated
    else:
        assert handovers == 0
    log = side.log_path.read_bytes()
    cells = trace_cells(traces)
    assert b"SaslAuthenticate" in cells and topic.encode() in cells  # the traces hold the exchanges...
    for blob in (log, cells, metrics.encode()):  # ...and nothing secret
        assert not [s for s in SECRETS if s in blob]

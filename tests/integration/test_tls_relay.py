"""A TLS sidecar whose clients' sessions the native core holds from their first byte (``relay:
auto``, ``native/src/relay/front.rs``), against a real Tansu: confluent-kafka with a client
certificate (mTLS) round-trips records, and its connections are handed to the core's relay after
their first answer; without a certificate, or with another authority's, a client gets nothing; a
plaintext Kafka client on the TLS port is closed with the hint. Each failure closes only its own
connection, with the event loop road's log line and counter; the same proxy with ``relay: off``
does the same on the event loop, for the record."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest
from fetchlat import native

from .certs import Certs, make_certs
from .conftest import TANSU_NODE_ID, free_ports, run_tansu, start_proxy, stop_proxy
from .test_bad_input import closed_by_proxy
from .test_faults import api_versions_frame
from .test_model_live import samples
from .test_tls import refused, tls_conf
from .traffic import expected, roundtrip

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(native.core() is None or not hasattr(native.core().Relay, "front"),
                                 reason=f"native core without TLS: {native.reason()}")]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize("relay", ["auto", "off"])
def test_a_tls_sidecars_clients_are_carried_by_the_core_from_their_first_byte(tmp_path: Path, certs: Certs,
                                                                                relay: str) -> None:
    base = free_ports(0, 1000)
    with run_tansu(tmp_path / "tansu.log", advertise_port=base) as broker:
        p = start_proxy(broker.bootstrap, tmp_path, "--sidecar-node", str(TANSU_NODE_ID), "--relay", relay,
                        "--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key),
                        "--tls-client-ca", str(certs.ca), base=base)
        try:
            topic = f"tls-relay-{uuid.uuid4().hex[:6]}"
            assert roundtrip(p.bootstrap, topic, n=20, extra=tls_conf(certs)) == expected(topic, 20)
            handovers = samples(p, "fetchlat_relay_handovers_total").get((), 0.0)
            if relay == "auto":
                assert handovers >= 2, "the TLS clients' connections were not handed to the core"
            else:
                assert handovers == 0
            fetches = samples(p, "fetchlat_fetches_total")
            assert sum(v for k, v in fetches.items() if dict(k)["kind"] == "consumer") >= 1
            assert refused(p.bootstrap, tls_conf(certs, client=False))  # no client certificate
            assert refused(p.bootstrap, tls_conf(certs, rogue=True))  # signed by another authority
            with socket.create_connection(("127.0.0.1", p.listen_port), timeout=10) as s:  # plaintext Kafka
                s.sendall(api_versions_frame())
                assert closed_by_proxy(s, within_s=5)  # at most a TLS alert comes back, then the close
            failed = samples(p, "fetchlat_connection_errors_total")
            assert failed.get((("reason", "tls_handshake_failed"),), 0) >= 3, failed
            after = f"tls-relay-after-{uuid.uuid4().hex[:6]}"
            assert roundtrip(p.bootstrap, after, extra=tls_conf(certs)) == expected(after)  # unharmed
            assert p.health()["ready"]
        finally:
            stop_proxy(p)
    log = p.log()
    assert ("holds each TLS client's session from its first byte" in log) == (relay == "auto")
    assert "TLS handshake failed" in log and "a plaintext client on a TLS listener?" in log
    assert "certificate" in log.lower()

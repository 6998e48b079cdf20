"""A TLS sidecar whose clients' sessions the native core holds from their first byte (``relay:
auto``, ``native/src/relay/front.rs``), against a real Tansu: confluent-kafka with a client
certificate (mTLS) round-trips records, and its connections are handed to the core's relay after
their first answer; without a certificate, or with another authority's, a client gets nothing; a
plaintext Kafka client on the TLS port is closed with the hint. Each failure closes only its own
connection, with the event loop road's log line and counter; the same proxy with ``relay: off``
does the same on the event loop, for the record. A SIGHUP reads the certificate files again: a
rotation in place reaches new connections on either road, and a broken one changes nothing."""

from __future__ import annotations

import shutil
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest
from fetchlat import native

from testkit.certs import Certs, make_certs

from .conftest import TANSU_NODE_ID, ProxyProc, free_ports, run_tansu, start_proxy, stop_proxy
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


def _log_has(p: ProxyProc, text: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if text in p.log():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("relay", ["auto", "off"])
def test_a_sighup_rereads_the_certificates_for_new_connections_on_either_road(tmp_path: Path, certs: Certs,
                                                                              relay: str) -> None:
    second = make_certs(tmp_path / "second")  # another authority, and a server certificate of its own
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(certs.server.cert, cert)
    shutil.copy(certs.server.key, key)
    base = free_ports(0, 1000)
    with run_tansu(tmp_path / "tansu.log", advertise_port=base) as broker:
        p = start_proxy(broker.bootstrap, tmp_path, "--sidecar-node", str(TANSU_NODE_ID), "--relay", relay,
                        "--tls-cert", str(cert), "--tls-key", str(key), base=base)
        try:
            first, rotated = tls_conf(certs, client=False), tls_conf(second, client=False)
            assert roundtrip(p.bootstrap, f"rot-{uuid.uuid4().hex[:6]}", extra=first)
            assert refused(p.bootstrap, rotated)
            # the rotation writes the new files in place, then signals
            shutil.copy(second.server.cert, cert)
            shutil.copy(second.server.key, key)
            p.proc.send_signal(signal.SIGHUP)
            assert _log_has(p, "TLS certificates re-read")
            topic = f"rot-{uuid.uuid4().hex[:6]}"
            assert roundtrip(p.bootstrap, topic, extra=rotated) == expected(topic)
            assert refused(p.bootstrap, first)
            # a rotation that leaves a file unreadable keeps the certificates in use
            key.write_text("not a key")
            p.proc.send_signal(signal.SIGHUP)
            assert _log_has(p, "TLS certificates not re-read")
            topic = f"rot-{uuid.uuid4().hex[:6]}"
            assert roundtrip(p.bootstrap, topic, extra=rotated) == expected(topic)
        finally:
            stop_proxy(p)

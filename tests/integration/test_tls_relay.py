"""A TLS sidecar whose clients' sessions the native core holds from their first byte (``relay:
auto``, ``native/src/relay/front.rs``), against a real Tansu: confluent-kafka with a client
certificate (mTLS) round-trips records, and its connections are handed to the core's relay after
their first answer; without a certificate, or with another authority's, a client gets nothing; a
plaintext Kafka client on the TLS port is closed with the hint. Each failure closes only its own
connection, with the event loop road's log line and counter; the same proxy with ``relay: off``
does the same on the event loop, for the record. A SIGHUP reads the certificate files again: a
rotation in place reaches new connections on either road, and a broken one changes nothing. A
sidecar speaking TLS to its broker (with a client certificate, through a TLS hop to Tansu) holds
each broker session from its ClientHello (``proxy/bridges.py``) and hands its connections over; one
that does not trust the broker's certificate never becomes ready, and says why."""

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

from .conftest import TANSU_NODE_ID, ProxyProc, free_ports, run_tansu, start_proxy, stop_proxy, wait_port
from .test_bad_input import closed_by_proxy
from .test_faults import api_versions_frame
from .test_model_live import consumer_fetches, samples
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
            assert consumer_fetches(p) >= 1
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


@pytest.mark.parametrize("relay", ["auto", "off"])
def test_a_sidecar_speaking_tls_to_its_broker_hands_its_connections_to_the_core(tmp_path: Path, certs: Certs,
                                                                                 relay: str) -> None:
    """plaintext clients -> the sidecar under test (``--upstream-tls`` with a client certificate)
    -> a TLS hop (a sidecar with ``--tls-client-ca``) -> Tansu: the sidecar's broker sessions are
    the core's from their ClientHello (``relay: auto``) and its connections are handed over;
    another whose authority does not sign the hop's certificate never becomes ready, and says why."""
    base = free_ports(0, 1000)  # the sidecar under test: what Tansu advertises
    (tmp_path / "hop").mkdir()
    (tmp_path / "rogue").mkdir()
    upstream = ["--upstream-tls", "--upstream-ca", str(certs.ca), "--upstream-cert", str(certs.client.cert),
                "--upstream-key", str(certs.client.key)]
    with run_tansu(tmp_path / "tansu.log", advertise_port=base) as broker:
        hop = start_proxy(broker.bootstrap, tmp_path / "hop", "--sidecar-node", str(TANSU_NODE_ID),
                          "--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key),
                          "--tls-client-ca", str(certs.ca))
        p: ProxyProc | None = None
        try:
            p = start_proxy(hop.bootstrap, tmp_path, "--sidecar-node", str(TANSU_NODE_ID), "--relay", relay,
                            *upstream, base=base)
            topic = f"tls-up-{uuid.uuid4().hex[:6]}"
            assert roundtrip(p.bootstrap, topic, n=20) == expected(topic, 20)
            handovers = samples(p, "fetchlat_relay_handovers_total").get((), 0.0)
            if relay == "auto":
                assert handovers >= 2, "the connections to a TLS broker were not handed to the core"
            else:
                assert handovers == 0
            assert consumer_fetches(p) >= 1
            assert samples(hop, "fetchlat_connections_total")  # every byte crossed the TLS hop
            # another sidecar that trusts another authority: the hop's certificate does not verify
            refused_before = samples(hop, "fetchlat_connection_errors_total").get(
                (("reason", "tls_handshake_failed"),), 0.0)
            rogue_base = free_ports(0, 1000)
            rogue = proxy_process_start(hop.bootstrap, tmp_path / "rogue", rogue_base, relay,
                                        "--upstream-ca", str(certs.rogue_ca))
            try:
                wait_port(rogue_base, 15)
                with socket.create_connection(("127.0.0.1", rogue_base), timeout=10) as s:
                    s.sendall(api_versions_frame())
                    assert closed_by_proxy(s, within_s=10)  # held, then closed: never answered
                # the core's words where it held the session, OpenSSL's on the event loop
                why = ("broker tls handshake failed: invalid peer certificate" if relay == "auto"
                       else "[SSL: CERTIFICATE_VERIFY_FAILED]")
                assert _log_has(rogue, f"broker unreachable for 1.0 s (127.0.0.1:{hop.listen_port}: {why}",
                                within_s=10)
            finally:
                rogue.stop()
            refused = samples(hop, "fetchlat_connection_errors_total").get((("reason", "tls_handshake_failed"),), 0.0)
            assert refused > refused_before, "the hop saw no refused handshake"
        finally:
            if p is not None:
                stop_proxy(p)
            stop_proxy(hop)
    assert p is not None
    log = p.log()
    assert ("holds each TLS broker connection's session from its first byte" in log) == (relay == "auto")


def proxy_process_start(upstream: str, home: Path, base: int, relay: str, *extra: str) -> ProxyProc:
    """A sidecar speaking TLS to ``upstream`` with ``extra`` settings, not waited for (it may never be ready)."""
    from fetchlat.embedded import proxy as proxy_process

    cfg = home / "hold.yaml"
    cfg.write_text("upstream_hold_timeout_s: 1\n")
    p = proxy_process.start(["--upstream", upstream, "--sidecar-node", str(TANSU_NODE_ID), "--relay", relay,
                             "--upstream-tls", "--config", str(cfg), *extra],
                            listen_port=base, metrics_port=base + 1000, log_path=home / "proxy.log")
    return ProxyProc(p.listen_port, p.metrics_port, p.proc, p.log_path)

"""TLS towards clients and towards brokers, through real proxy processes with generated
certificates: a TLS + mTLS proxy in front of Tansu (confluent-kafka with a client
certificate round-trips records; without one, or with a rogue one, it gets nothing); a second
proxy whose upstream is the first over TLS with a client certificate (plaintext client ->
proxy -> TLS -> proxy -> Tansu); an upstream certificate that does not verify; a plaintext
client on the TLS port. Each failure closes only its connection with a clear log line."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from testkit.certs import Certs, make_certs

from .conftest import Broker, ProxyProc, start_proxy, stop_proxy
from .test_bad_input import closed_by_proxy
from .test_faults import api_versions_frame
from .traffic import expected, roundtrip

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_conf(certs: Certs, client: bool = True, rogue: bool = False) -> dict[str, object]:
    conf: dict[str, object] = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca), "log_level": 0,
                               "socket.timeout.ms": 4000}
    if client:
        pair = certs.rogue_client if rogue else certs.client
        conf.update({"ssl.certificate.location": str(pair.cert), "ssl.key.location": str(pair.key)})
    return conf


def refused(bootstrap: str, extra: dict[str, object]) -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": bootstrap, **extra}).list_topics(timeout=3)
    except Exception:
        return True
    return False


def tls_proxy(tansu: Broker, tmp_path: Path, certs: Certs) -> ProxyProc:
    return start_proxy(tansu.bootstrap, tmp_path, "--tls-cert", str(certs.server.cert), "--tls-key",
                       str(certs.server.key), "--tls-client-ca", str(certs.ca))


def test_clients_speak_tls_with_mtls_to_the_proxy(tansu: Broker, tmp_path: Path, certs: Certs) -> None:
    front = tls_proxy(tansu, tmp_path, certs)
    try:
        assert roundtrip(front.bootstrap, "mtls", extra=tls_conf(certs)) == expected("mtls")
        assert refused(front.bootstrap, tls_conf(certs, client=False))  # no client certificate
        assert refused(front.bootstrap, tls_conf(certs, rogue=True))  # signed by another CA
        with socket.create_connection(("127.0.0.1", front.listen_port), timeout=10) as s:  # plaintext Kafka
            s.sendall(api_versions_frame())
            assert closed_by_proxy(s, within_s=5)  # at most a TLS alert comes back, then the close
        assert roundtrip(front.bootstrap, "after", extra=tls_conf(certs)) == expected("after")  # unharmed
        assert front.health()["ready"]
    finally:
        stop_proxy(front)
    log = front.log()
    assert "TLS handshake failed" in log and "a plaintext client on a TLS listener?" in log
    # OpenSSL's words (the event loop's road) or rustls' (the core's, the default)
    assert any(w in log.lower() for w in ("peer_did_not_return_a_certificate", "certificate required",
                                          "peer sent no certificates"))


def test_the_proxy_speaks_tls_with_a_client_certificate_to_its_upstream(tansu: Broker, tmp_path: Path,
                                                                         certs: Certs) -> None:
    front = tls_proxy(tansu, tmp_path, certs)
    try:
        back = start_proxy(front.bootstrap, tmp_path, "--upstream-tls", "--upstream-ca", str(certs.ca),
                           "--upstream-cert", str(certs.client.cert), "--upstream-key", str(certs.client.key))
    except Exception:
        stop_proxy(front)
        raise
    try:
        assert roundtrip(back.bootstrap, "chained") == expected("chained")
        fetches = [line for line in front.metrics().splitlines() if line.startswith("fetchlat_fetches_total")]
        assert fetches, "the TLS hop saw the fetches"
    finally:
        stop_proxy(back)
        stop_proxy(front)


def test_an_upstream_certificate_that_does_not_verify_is_refused(tansu: Broker, tmp_path: Path,
                                                                  certs: Certs) -> None:
    front = tls_proxy(tansu, tmp_path, certs)
    cfg = tmp_path / "rogue.yaml"
    cfg.write_text(f"upstream_tls: true\nupstream_ca: {certs.rogue_ca}\nupstream_cert: {certs.client.cert}\n"
                   f"upstream_key: {certs.client.key}\nupstream_hold_timeout_s: 1\n")
    back = None
    try:
        import subprocess
        import sys

        from .conftest import free_ports
        base = free_ports(0, 112, 1000)
        log_path = tmp_path / "rogue-proxy.log"
        with open(log_path, "wb") as log:
            back_proc = subprocess.Popen([sys.executable, "-m", "fetchlat.app", "proxy", "--upstream",
                                          front.bootstrap, "--listen", f"127.0.0.1:{base}", "--metrics-listen",
                                          f"127.0.0.1:{base + 1000}", "--config", str(cfg)],
                                         stdout=log, stderr=subprocess.STDOUT)
        back = back_proc
        time.sleep(2.0)  # it starts, but never becomes ready: the broker's certificate does not verify
        with socket.create_connection(("127.0.0.1", base), timeout=10) as s:
            s.sendall(api_versions_frame())
            s.settimeout(10)
            assert s.recv(100) == b""  # held, then closed: nothing unverified is spoken to
    finally:
        if back is not None:
            back.terminate()
            back.wait(10)
        stop_proxy(front)
    text = log_path.read_text()
    assert "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text

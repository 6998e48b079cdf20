"""Security through the real proxy process: SASL passes through untouched (Tansu started with
``--authentication`` offers SCRAM-SHA-256 only and has no users in memory storage, so every
attempt fails -- and must fail exactly as it does directly); no password, SASL token or record
content reaches the proxy's DEBUG log, its traces or its metrics; the proxy opens connections
only to the configured broker; the admin endpoint binds loopback by default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .conftest import Broker, _socket_owners, _tcp_table, free_ports, run_tansu, start_proxy, stop_proxy

pytestmark = pytest.mark.integration

PASSWORD = "pw-Secret-7731"
USER = "alice-u5er"
MARKERS = (b"KEY-MARKER-41", b"VALUE-MARKER-42", b"HDR-MARKER-43")


@pytest.fixture
def tansu_auth(tmp_path: Path) -> Iterator[Broker]:
    with run_tansu(tmp_path / "tansu-auth.log", "--authentication") as broker:
        yield broker


def sasl_attempt(bootstrap: str, mechanism: str) -> str:
    """What confluent-kafka reports when authenticating with ``mechanism``."""
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD,
                         "error_cb": lambda e: errors.append(e.str()), "log_level": 0,
                         "reconnect.backoff.ms": 500})
    try:
        admin.list_topics(timeout=4)
        return "ok"
    except Exception:
        pass
    deadline = time.monotonic() + 5
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)
    msg = " | ".join(errors)
    if "unknown-user" in msg or "SASL SCRAM" in msg:
        return "scram rejected: unknown user"
    if "mechanism handshake failed" in msg or "AUTH_HANDSHAKE" in msg or "Broker transport failure" in msg:
        return "mechanism refused"
    return msg or "no error reported"


def secrets_in(blob: bytes) -> list[bytes]:
    import base64

    secrets = [PASSWORD.encode(), base64.b64encode(PASSWORD.encode()), f"n={USER}".encode(), *MARKERS]
    return [s for s in secrets if s in blob]


def trace_cells(trace_dir: Path) -> bytes:
    out = []
    for f in trace_dir.rglob("*.parquet"):
        for col in pq.read_table(f).to_pydict().values():
            out += [repr(v) for v in col]
    return "\n".join(out).encode()


def test_sasl_passes_through_and_nothing_secret_is_logged_or_traced(tansu_auth: Broker, tmp_path: Path) -> None:
    direct = {m: sasl_attempt(tansu_auth.bootstrap, m) for m in ("SCRAM-SHA-256", "PLAIN")}
    proxy = start_proxy(tansu_auth.bootstrap, tmp_path, "--log-level", "DEBUG", "--trace-dir", str(tmp_path / "tr"))
    try:
        proxied = {m: sasl_attempt(proxy.bootstrap, m) for m in ("SCRAM-SHA-256", "PLAIN")}
        assert proxy.health()["live"]
        metrics = proxy.metrics()
    finally:
        stop_proxy(proxy)
    assert direct == {"SCRAM-SHA-256": "scram rejected: unknown user", "PLAIN": "mechanism refused"}
    assert proxied == direct  # the same outcome: tokens went through untouched both ways
    assert 'api="SaslAuthenticate"' in metrics and 'api="SaslHandshake"' in metrics
    assert not secrets_in(proxy.log_path.read_bytes())
    assert not secrets_in(trace_cells(tmp_path / "tr"))
    assert not secrets_in(metrics.encode())


def test_record_contents_never_reach_logs_traces_or_metrics(tansu: Broker, tmp_path: Path) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    proxy = start_proxy(tansu.bootstrap, tmp_path, "--log-level", "DEBUG", "--trace-dir", str(tmp_path / "tr"))
    try:
        topic = f"sec-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
            f.result(timeout=20)
        p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0})
        for _ in range(5):
            p.produce(topic, key=MARKERS[0], value=MARKERS[1], headers=[("h", MARKERS[2])], partition=0)
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic, "fetch.wait.max.ms": 50})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.key(), m.value(), m.headers()))
        c.close()
        metrics = proxy.metrics()
    finally:
        stop_proxy(proxy)
    assert got == [(MARKERS[0], MARKERS[1], [("h", MARKERS[2])])] * 5  # the records did pass
    assert not secrets_in(proxy.log_path.read_bytes())
    cells = trace_cells(tmp_path / "tr")
    assert topic.encode() in cells  # the traces were written, and hold the topic...
    assert not secrets_in(cells)  # ...but no key, value or header
    assert not secrets_in(metrics.encode())


def test_the_proxy_connects_only_to_the_configured_broker(tansu: Broker, tmp_path: Path) -> None:
    from .test_clients import confluent_scenario

    proxy = start_proxy(tansu.bootstrap, tmp_path)
    remote_ports: set[int] = set()
    try:
        own = proxy.ports | {proxy.metrics_port}
        import threading

        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                owners = _socket_owners()
                for lport, rport, inode, state in _tcp_table():
                    if state == "01" and owners.get(inode) == proxy.proc.pid and lport not in own:
                        remote_ports.add(rport)  # an outbound connection of the proxy
                stop.wait(0.01)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        confluent_scenario(proxy.bootstrap)
        for payload in (b"GET / HTTP/1.1\r\n\r\n", os.urandom(64)):  # garbage steers nothing either
            with socket.create_connection(("127.0.0.1", proxy.listen_port)) as s:
                s.sendall(payload)
        time.sleep(0.3)
        stop.set()
        t.join(5)
    finally:
        stop_proxy(proxy)
    assert remote_ports == {tansu.port}


def test_admin_endpoint_binds_loopback_by_default(tansu: Broker, tmp_path: Path) -> None:
    base = free_ports(0, 1 + 111)
    log = tmp_path / "default-admin.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fetchlat.app", "proxy", "--upstream", tansu.bootstrap,
                                 "--listen", f"127.0.0.1:{base}"], stdout=out, stderr=subprocess.STDOUT,
                                env={k: v for k, v in os.environ.items() if not k.startswith("FETCHLAT_")})
    try:
        deadline = time.monotonic() + 15
        listening: list[str] = []
        while time.monotonic() < deadline and not listening:
            owners = _socket_owners()
            listening = [line.split()[1] for path in ("/proc/net/tcp", "/proc/net/tcp6")
                         for line in Path(path).read_text().splitlines()[1:]
                         if line.split()[3] == "0A" and line.split()[1].endswith(":24F8")  # 9464, listening
                         and owners.get(int(line.split()[9])) == proc.pid]
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
    if not listening and "cannot serve metrics" in log.read_text():
        pytest.fail("port 9464 is taken on this machine; the default could not be checked")
    assert listening == ["0100007F:24F8"], listening  # 127.0.0.1:9464, nothing else

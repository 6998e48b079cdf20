"""Bad input to ``fetchlat pcap``: a file that is no capture, a capture cut mid-packet, a snap
length that cuts frames, and traffic on the broker port that is not Kafka. Each gets a clear
error or a count, and nothing else is lost: the other conversations and files are measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fetchlat.capture.flows import TLS
from fetchlat.capture.packets import ACK, FIN, SYN
from fetchlat.capture.run import feed
from fetchlat.capture.source import Capture, CaptureError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.captures import CAPTURES, conversations
from testkit.pcap_files import ipv4_tcp, table, write_pcap

CLIENT, OTHER, BROKER = ("10.0.0.2", 40000), ("10.0.0.3", 40001), ("10.0.0.1", 9092)


def kafka_conversation(client: tuple[str, int], t0: int) -> list[tuple[int, bytes]]:
    """A real client's first conversation (confluent-kafka, from tests/data/captures), one
    message per packet, 1 ms apart."""
    out = [(t0, ipv4_tcp(client, BROKER, 99, SYN)), (t0, ipv4_tcp(BROKER, client, 499, SYN | ACK))]
    seq = {True: 100, False: 500}
    t = t0
    for f in conversations("confluent")[2]:
        t += 1_000_000
        req = f.direction == "req"
        out.append((t, ipv4_tcp(client, BROKER, seq[req], ACK, f.wire) if req else
                    ipv4_tcp(BROKER, client, seq[req], ACK, f.wire)))
        seq[req] += len(f.wire)
    out.append((t + 1, ipv4_tcp(client, BROKER, seq[True], FIN | ACK)))
    out.append((t + 1, ipv4_tcp(BROKER, client, seq[False], FIN | ACK)))
    return out


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fetchlat.app", "pcap", *args, "--quiet"], capture_output=True,
                          text=True, timeout=60)


def test_a_file_that_is_not_a_capture_is_named_and_the_others_are_still_read(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"GET / HTTP/1.1\r\n\r\n" * 10)
    with pytest.raises(CaptureError, match="not a pcap or pcapng capture"):
        Capture(str(junk))
    r = run(str(junk), str(CAPTURES / "confluent.pcap"), "--broker-port", "39093")
    assert r.returncode == 2
    assert "junk.pcap: not a pcap or pcapng capture" in r.stderr
    assert "conversations: 7 (complete 7)" in r.stdout


def test_a_capture_cut_mid_packet_keeps_what_it_read(tmp_path: Path) -> None:
    good = tmp_path / "good.pcap"
    write_pcap(good, kafka_conversation(CLIENT, 10**18))
    data = good.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) * 2 // 3])
    flows, rows = table({9092})
    with pytest.raises(CaptureError, match="damaged or cut after 11 packets"):
        feed(Capture(str(cut)), flows)  # the packets of the batch before the damage are read again
    flows.close_all()
    whole, whole_rows = table({9092})
    feed(Capture(str(good)), whole)
    whole.close_all()
    got = [r["correlation_id"] for r in rows.exchanges()]
    assert got and got == [r["correlation_id"] for r in whole_rows.exchanges()][: len(got)]
    assert sum(flows.ended.values()) == 1


def test_a_snap_length_that_cuts_frames_is_an_error_up_front(tmp_path: Path) -> None:
    p = tmp_path / "snap.pcap"
    write_pcap(p, kafka_conversation(CLIENT, 10**18), snaplen=96)
    r = run(str(p), "--broker-port", "9092")
    assert r.returncode == 2
    assert "cut at 96 bytes by the capture's snap length" in r.stderr and "tcpdump -s 0" in r.stderr


def test_http_and_tls_on_the_broker_port_are_counted_and_kafka_beside_them_is_measured(tmp_path: Path) -> None:
    t0 = 10**18
    http = [(t0, ipv4_tcp(OTHER, BROKER, 9, SYN)),
            (t0 + 1, ipv4_tcp(OTHER, BROKER, 10, ACK, b"GET / HTTP/1.1\r\n\r\n"))]
    tls_client = ("10.0.0.4", 40002)
    hello = bytes.fromhex("160301020001") + b"\x00" * 100
    tls = [(t0, ipv4_tcp(tls_client, BROKER, 9, SYN)), (t0 + 2, ipv4_tcp(tls_client, BROKER, 10, ACK, hello))]
    p = tmp_path / "mixed.pcap"
    write_pcap(p, sorted(http + tls + kafka_conversation(CLIENT, t0), key=lambda x: x[0]))
    flows, rows = table({9092})
    feed(Capture(str(p)), flows)
    flows.close_all()
    assert flows.ended["http_on_plaintext"] == 1 and flows.ended[TLS] == 1 and flows.ended["complete"] == 1
    assert len(rows.exchanges()) == sum(1 for f in conversations("confluent")[2] if f.direction == "resp")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 4000), junk=st.binary(max_size=64), at=st.integers(0, 4000))
def test_a_damaged_capture_gives_a_clear_error_or_a_count_never_a_crash(tmp_path: Path, cut: int, junk: bytes,
                                                                         at: int) -> None:
    """A real capture cut anywhere, with junk written anywhere: ``CaptureError`` (named) or a
    normal end, and every exchange measured before the damage is one of the whole capture's."""
    data = (CAPTURES / "confluent.pcap").read_bytes()
    bad = data[:at] + junk + data[at + len(junk):]
    bad = bad[: len(bad) - cut] if cut < len(bad) else bad[:24]
    path = tmp_path / "damaged.pcap"
    path.write_bytes(bad)
    whole, whole_rows = table({39093})
    feed(Capture(str(CAPTURES / "confluent.pcap")), whole)
    good = {(r["conn_id"], r["correlation_id"]) for r in whole_rows.exchanges()}
    flows, rows = table({39093})
    try:
        feed(Capture(str(path)), flows)
    except CaptureError as exc:
        assert str(path) in str(exc)
    flows.close_all()
    if not junk:
        assert {(r["conn_id"], r["correlation_id"]) for r in rows.exchanges()} <= good

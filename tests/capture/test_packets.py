"""Link, IP and TCP headers: every link type tcpdump writes on Linux, IPv4 and IPv6, and what
is counted instead of read."""

from __future__ import annotations

import ipaddress
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from fetchlat.capture.packets import (
    ACK,
    DLT_EN10MB,
    DLT_LINUX_SLL,
    DLT_LINUX_SLL2,
    DLT_NULL,
    DLT_RAW,
    PSH,
    Segment,
    tcp_segment,
    unsupported_link,
)

from testkit.pcap_files import ipv4_tcp, table

V6A, V6B = ipaddress.IPv6Address("fd00::1").packed, ipaddress.IPv6Address("fd00::2").packed


def tcp(sport: int, dport: int, seq: int, payload: bytes) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, ACK | PSH, 65535, 0, 0) + payload


def ipv6(payload: bytes) -> bytes:
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), 6, 64, V6A, V6B) + payload


def strip_eth(frame: bytes) -> bytes:
    return frame[14:]


@pytest.mark.parametrize(("linktype", "frame"), [
    (DLT_EN10MB, ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 7, ACK, b"kafka")),
    (DLT_EN10MB, b"\x00" * 12 + b"\x81\x00\x00\x05" + b"\x08\x00"  # an 802.1Q tag
     + strip_eth(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 7, ACK, b"kafka"))),
    (DLT_LINUX_SLL, b"\x00" * 14 + b"\x08\x00" + strip_eth(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 7, ACK,
                                                                   b"kafka"))),
    (DLT_LINUX_SLL2, b"\x08\x00" + b"\x00" * 18 + strip_eth(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 7, ACK,
                                                                    b"kafka"))),
    (DLT_NULL, b"\x02\x00\x00\x00" + strip_eth(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 7, ACK, b"kafka"))),
    (DLT_RAW, strip_eth(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 7, ACK, b"kafka"))),
    (DLT_EN10MB, b"\x00" * 12 + b"\x86\xdd" + ipv6(tcp(5000, 9092, 7, b"kafka"))),
    (DLT_LINUX_SLL2, b"\x86\xdd" + b"\x00" * 18 + ipv6(tcp(5000, 9092, 7, b"kafka"))),
])
def test_every_link_type_and_ip_version_gives_the_segment(linktype: int, frame: bytes) -> None:
    seg = tcp_segment(linktype, memoryview(frame + b"\x00" * 6))  # Ethernet padding is not payload
    assert isinstance(seg, Segment)
    assert (seg.src[1], seg.dst[1], seg.seq, bytes(seg.payload), seg.cut) == (5000, 9092, 7, b"kafka", False)


def test_what_is_not_tcp_is_counted_by_name() -> None:
    udp = bytearray(strip_eth(ipv4_tcp(("10.0.0.1", 1), ("10.0.0.2", 2), 0, ACK)))
    udp[9] = 17
    assert tcp_segment(DLT_RAW, memoryview(bytes(udp))) == "not_tcp"
    frag = bytearray(strip_eth(ipv4_tcp(("10.0.0.1", 1), ("10.0.0.2", 2), 0, ACK, b"x")))
    frag[6:8] = b"\x20\x00"  # more fragments
    assert tcp_segment(DLT_RAW, memoryview(bytes(frag))) == "ip_fragment"
    assert tcp_segment(DLT_EN10MB, memoryview(b"\x00" * 12 + b"\x08\x06" + b"\x00" * 28)) == "not_ip"  # ARP
    assert tcp_segment(DLT_EN10MB, memoryview(b"\x00" * 10)) == "not_ip"
    assert unsupported_link(DLT_EN10MB) is None and "not one fetchlat reads" in (unsupported_link(105) or "")


def test_a_packet_the_snap_length_cut_comes_back_cut() -> None:
    frame = ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 7, ACK, b"k" * 500)
    seg = tcp_segment(DLT_EN10MB, memoryview(frame[:96]))
    assert isinstance(seg, Segment) and seg.cut and len(seg.payload) == 96 - 54


def test_several_brokers_on_one_port_are_told_apart_by_address() -> None:
    flows, _ = table({9092})
    for i, broker in enumerate(("10.0.0.10", "10.0.0.11")):
        frame = ipv4_tcp(("10.0.0.1", 5000), (broker, 9092), 0, 0x02)  # SYN, same client port
        seg = tcp_segment(DLT_EN10MB, memoryview(frame))
        assert isinstance(seg, Segment)
        flows.segment(seg, i)
    assert sorted(f.name for f in flows.flows.values()) == ["10.0.0.1:5000 -> 10.0.0.10:9092",
                                                             "10.0.0.1:5000 -> 10.0.0.11:9092"]


def test_packets_without_tcp_are_counted_in_the_summary(tmp_path: Path) -> None:
    from testkit.pcap_files import write_pcap

    arp = b"\x00" * 12 + b"\x08\x06" + b"\x00" * 28
    p = tmp_path / "arp.pcap"
    write_pcap(p, [(10**18, arp), (10**18 + 1, arp)])
    r = subprocess.run([sys.executable, "-m", "fetchlat.app", "pcap", str(p), "--broker-port", "9092", "--quiet"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "packets without TCP: not_ip 2" in r.stdout


def test_a_repeated_syn_is_one_conversation_and_a_reused_port_pair_is_a_new_one() -> None:
    flows, _ = table({9092})
    syn = tcp_segment(DLT_EN10MB, memoryview(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 100, 0x02)))
    again = tcp_segment(DLT_EN10MB, memoryview(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 100, 0x02)))
    reused = tcp_segment(DLT_EN10MB, memoryview(ipv4_tcp(("10.0.0.1", 5000), ("10.0.0.2", 9092), 90000, 0x02)))
    for i, seg in enumerate((syn, again, reused)):
        assert isinstance(seg, Segment)
        flows.segment(seg, i)
    assert sum(flows.ended.values()) == 1 and len(flows.flows) == 1

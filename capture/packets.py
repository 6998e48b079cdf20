"""Link, IP and TCP headers of one captured packet: the TCP segment it carries, or why none.

Link types: Ethernet (with 802.1Q tags), Linux cooked v1 and v2 (``tcpdump -i any``), BSD
loopback (NULL, LOOP) and raw IP. IPv4 (fragments are counted, not reassembled: TCP over a
sane MTU never fragments) and IPv6 (TCP as the first next header). Must never: keep a
reference to the packet beyond the payload view it returns.
"""

from __future__ import annotations

import struct
from typing import Final

DLT_NULL: Final = 0
DLT_EN10MB: Final = 1
DLT_RAW: Final = 12
DLT_RAW_OPENBSD: Final = 14
DLT_LOOP: Final = 108
DLT_LINKTYPE_RAW: Final = 101
DLT_LINUX_SLL: Final = 113
DLT_LINUX_SLL2: Final = 276
LINK_TYPES: Final = {DLT_NULL: "BSD loopback", DLT_EN10MB: "Ethernet", DLT_RAW: "raw IP", DLT_RAW_OPENBSD: "raw IP",
                     DLT_LOOP: "OpenBSD loopback", DLT_LINKTYPE_RAW: "raw IP", DLT_LINUX_SLL: "Linux cooked",
                     DLT_LINUX_SLL2: "Linux cooked v2"}

ETH_IPV4: Final = 0x0800
ETH_IPV6: Final = 0x86DD
ETH_VLAN: Final = (0x8100, 0x88A8, 0x9100)
TCP: Final = 6

FIN: Final = 0x01
SYN: Final = 0x02
RST: Final = 0x04
PSH: Final = 0x08
ACK: Final = 0x10

_U16 = struct.Struct("!H")
_TCP = struct.Struct("!HHIIBB")  # ports, seq, ack, data offset, flags


class Segment:
    """One TCP segment: its endpoints (``(ip, port)``, ip as the raw 4 or 16 bytes), sequence
    number, flags and payload."""

    __slots__ = ("cut", "dst", "flags", "payload", "seq", "src")

    def __init__(self, src: tuple[bytes, int], dst: tuple[bytes, int], seq: int, flags: int,
                 payload: memoryview, cut: bool = False) -> None:
        self.src = src
        self.dst = dst
        self.seq = seq
        self.flags = flags
        self.payload = payload
        self.cut = cut  # the capture's snap length cut this segment's payload short


def unsupported_link(linktype: int) -> str | None:
    if linktype in LINK_TYPES:
        return None
    return (f"link type {linktype} is not one fetchlat reads (Ethernet, Linux cooked, loopback, raw IP); "
            "capture with tcpdump -i <interface> or -i any")


def _ip_offset(linktype: int, pkt: memoryview) -> tuple[int, int]:
    """(offset of the IP header, its version 4/6), or (-1, 0): not IP."""
    n = len(pkt)
    if linktype == DLT_EN10MB:
        if n < 14:
            return -1, 0
        off, ethertype = 12, _U16.unpack_from(pkt, 12)[0]
        while ethertype in ETH_VLAN and n >= off + 6:
            off += 4
            ethertype = _U16.unpack_from(pkt, off)[0]
        off += 2
    elif linktype == DLT_LINUX_SLL:
        if n < 16:
            return -1, 0
        off, ethertype = 16, _U16.unpack_from(pkt, 14)[0]
    elif linktype == DLT_LINUX_SLL2:
        if n < 20:
            return -1, 0
        off, ethertype = 20, _U16.unpack_from(pkt, 0)[0]
    elif linktype in (DLT_NULL, DLT_LOOP):
        if n < 5:
            return -1, 0
        off = 4
        ethertype = ETH_IPV4 if pkt[4] >> 4 == 4 else ETH_IPV6 if pkt[4] >> 4 == 6 else 0
    else:  # raw IP
        if n < 1:
            return -1, 0
        off = 0
        ethertype = ETH_IPV4 if pkt[0] >> 4 == 4 else ETH_IPV6 if pkt[0] >> 4 == 6 else 0
    if ethertype == ETH_IPV4:
        return off, 4
    if ethertype == ETH_IPV6:
        return off, 6
    return -1, 0


def tcp_segment(linktype: int, pkt: memoryview) -> Segment | str:
    """The TCP segment in ``pkt``, or a short reason it has none (a counter's label). A packet
    whose IP length says more than the capture kept comes back ``cut`` (the snap length)."""
    off, version = _ip_offset(linktype, pkt)
    if off < 0:
        return "not_ip"
    n = len(pkt)
    if version == 4:
        if n < off + 20:
            return "truncated"
        ihl = (pkt[off] & 0x0F) * 4
        total = _U16.unpack_from(pkt, off + 2)[0]
        if pkt[off + 9] != TCP:
            return "not_tcp"
        if _U16.unpack_from(pkt, off + 6)[0] & 0x3FFF:  # more fragments, or an offset
            return "ip_fragment"
        src_ip = bytes(pkt[off + 12 : off + 16])
        dst_ip = bytes(pkt[off + 16 : off + 20])
        tcp = off + ihl
        end = off + total if total else n  # total 0: TCP segmentation offload on the capturing host
    else:
        if n < off + 40:
            return "truncated"
        if pkt[off + 6] != TCP:
            return "not_tcp"
        src_ip = bytes(pkt[off + 8 : off + 24])
        dst_ip = bytes(pkt[off + 24 : off + 40])
        tcp = off + 40
        plen = _U16.unpack_from(pkt, off + 4)[0]
        end = tcp + plen if plen else n
    short = end > n
    if short:
        end = n
    if end < tcp + 20:
        return "truncated"
    sport, dport, seq, _ack, doff, flags = _TCP.unpack_from(pkt, tcp)
    data = tcp + (doff >> 4) * 4
    if data > end:
        return "truncated"
    return Segment((src_ip, sport), (dst_ip, dport), seq, flags, pkt[data:end], short)


def format_ip(ip: bytes) -> str:
    if len(ip) == 4:
        return ".".join(str(b) for b in ip)
    import ipaddress

    return str(ipaddress.IPv6Address(ip))

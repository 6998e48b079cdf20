"""A capture: pcap or pcapng, from a file or a live pipe (``-``: standard input), read with
libpcap through pcapy-ng (chosen by measured speed: docs/capture.md, "The reader").

Yields the packets in batches -- (timestamp ns, bytes) -- so the Python cost per packet is a
slice, not a call into C. Must never: hide a file it cannot read (a ``CaptureError`` names it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

import pcapy

from .packets import unsupported_link

BATCH: Final = 1024
_META = struct.Struct("=IIII")  # sec, usec, offset, caplen


class CaptureError(Exception):
    pass


class Capture:
    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._reader = pcapy.open_offline(path)
        except pcapy.PcapError as exc:
            what = "standard input" if path == "-" else path
            raise CaptureError(f"{what}: not a pcap or pcapng capture ({exc})") from None
        self.linktype = int(self._reader.datalink())
        problem = unsupported_link(self.linktype)
        if problem is not None:
            raise CaptureError(f"{path}: {problem}")
        self.packets = 0
        self.bytes = 0

    def batches(self) -> Iterator[tuple[bytes, list[tuple[int, int, int]]]]:
        """(buffer, [(timestamp ns, offset, length)]) per batch, until the capture ends. A
        capture cut short mid-packet ends there with a CaptureError naming how far it got."""
        reader = self._reader
        while True:
            try:
                data, meta = reader.next_batch(BATCH)
            except pcapy.PcapError as exc:
                raise CaptureError(f"{self.path}: the capture is damaged or cut after {self.packets} packets ({exc})"
                                   ) from None
            if not meta:
                return
            out = [(sec * 1_000_000_000 + usec * 1000, off, n) for sec, usec, off, n in _META.iter_unpack(meta)]
            self.packets += len(out)
            self.bytes += len(data)
            yield data, out

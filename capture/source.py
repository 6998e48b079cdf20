"""A capture: pcap or pcapng, from a file or a live pipe (``-``: standard input), read with
libpcap through pcapy-ng (chosen by measured speed: docs/capture.md, "The reader").

Yields the packets of a file in batches -- (timestamp ns, bytes) -- so the Python cost per
packet is a slice, not a call into C; a live pipe one packet at a time, as it comes.
Must never: hide a file it cannot read (a ``CaptureError`` names it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

import pcapy

from .packets import unsupported_link

# Packets per call from a file. Reading bulk.pcap (54 KB packets) and small.pcap (185 bytes)
# of bench/pcap_speed.py takes 0.41 / 0.06 CPU-s in batches of 1024 (the batch buffer grows
# with the packets), 0.09 / 0.05 in batches of 64, and 0.12 / 0.36 one by one.
BATCH: Final = 64
PIPE_BATCH: Final = 1  # from a live pipe: libpcap waits until a batch is full, so metrics would lag
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
        batch = PIPE_BATCH if self.path == "-" else BATCH
        while True:
            try:
                data, meta = reader.next_batch(batch)
            except pcapy.PcapError as exc:
                if batch > 1:  # the batch's good packets went with the error: read them again, one by one
                    yield from self._salvage()
                raise CaptureError(f"{self.path}: the capture is damaged or cut after {self.packets} packets ({exc})"
                                   ) from None
            if not meta:
                return
            out = [(sec * 1_000_000_000 + usec * 1000, off, n) for sec, usec, off, n in _META.iter_unpack(meta)]
            self.packets += len(out)
            self.bytes += len(data)
            yield data, out

    def _salvage(self) -> Iterator[tuple[bytes, list[tuple[int, int, int]]]]:
        """The packets between the last whole batch and the damage: the file opened again, the
        packets already read skipped, the rest read one at a time until the damage."""
        reader = pcapy.open_offline(self.path)
        skip = self.packets
        while skip > 0:
            _, meta = reader.next_batch(min(BATCH, skip))
            skip -= len(meta) // _META.size
        while True:
            try:
                header, data = reader.next()
            except pcapy.PcapError:
                return
            if header is None:
                return
            sec, usec = header.getts()
            self.packets += 1
            self.bytes += len(data)
            yield data, [(sec * 1_000_000_000 + usec * 1000, 0, len(data))]

"""One direction of a TCP conversation, its bytes put back in order (sans-I/O).

Segments go in with their capture timestamps; contiguous bytes come out, each chunk stamped
with the time of the packet that made it contiguous (a segment that arrived before a hole was
filled is delivered when the hole is). Retransmissions and duplicates deliver nothing twice;
overlaps are trimmed; sequence numbers wrap. A hole that is still open when more than
``max_pending_bytes`` wait behind it, or when the conversation ends, is a lost segment: the
stream stops for good (``lost``), because a Kafka frame cut anywhere cannot be trusted again.
Must never: guess the missing bytes.
"""

from __future__ import annotations

from typing import Final

MAX_PENDING_BYTES: Final = 16 << 20
_MOD: Final = 1 << 32


def seq_diff(a: int, b: int) -> int:
    """``a - b`` in sequence space (wrapping at 2**32), as a signed 32-bit number."""
    d = (a - b) % _MOD
    return d - _MOD if d >= 1 << 31 else d


class Stream:
    """The bytes one side sent, in order."""

    __slots__ = ("delivered", "duplicate_bytes", "lost", "max_pending_bytes", "next_seq", "pending",
                 "pending_bytes", "started_with_syn")

    def __init__(self, max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self.next_seq: int | None = None  # the sequence number of the next byte to deliver
        self.pending: dict[int, bytes] = {}  # seq -> bytes, beyond a hole
        self.pending_bytes = 0
        self.max_pending_bytes = max_pending_bytes
        self.delivered = 0
        self.duplicate_bytes = 0
        self.lost = False
        self.started_with_syn = False

    def syn(self, seq: int) -> None:
        """A SYN (or SYN-ACK) with this initial sequence number: data starts at ``seq + 1``."""
        if self.next_seq is None:
            self.next_seq = (seq + 1) % _MOD
            self.started_with_syn = True

    def add(self, seq: int, payload: bytes | memoryview) -> list[bytes]:
        """A segment's payload; the chunks now contiguous, in order (empty when it only fills
        the buffer beyond a hole, repeats what was delivered, or the stream is lost)."""
        if self.lost or not payload:
            return []
        if self.next_seq is None:  # mid-conversation: the first byte seen is where it starts
            self.next_seq = seq
        d = seq_diff(seq, self.next_seq)
        n = len(payload)
        if d < 0:  # starts before what is delivered: a retransmission or an overlap
            if d + n <= 0:
                self.duplicate_bytes += n
                return []
            self.duplicate_bytes += -d
            payload = payload[-d:]
            seq, d, n = self.next_seq, 0, n + d
        if d > 0:
            old = self.pending.get(seq)
            if old is None or len(old) < n:
                self.pending[seq] = bytes(payload)
                self.pending_bytes += n - (len(old) if old is not None else 0)
                if old is not None:
                    self.duplicate_bytes += len(old)
            else:
                self.duplicate_bytes += n
            if self.pending_bytes > self.max_pending_bytes:
                self.lose()
            return []
        out = [bytes(payload)]
        self.next_seq = (seq + n) % _MOD
        self.delivered += n
        if self.pending:
            self._drain(out)
        return out

    def _drain(self, out: list[bytes]) -> None:
        """Deliver what waited beyond the hole the last segment filled."""
        while self.pending:
            progressed = False
            for seq in list(self.pending):
                assert self.next_seq is not None
                d = seq_diff(seq, self.next_seq)
                if d > 0:
                    continue
                data = self.pending.pop(seq)
                self.pending_bytes -= len(data)
                progressed = True
                if d + len(data) <= 0:
                    self.duplicate_bytes += len(data)
                    continue
                if d < 0:
                    self.duplicate_bytes += -d
                    data = data[-d:]
                out.append(data)
                self.next_seq = (self.next_seq + len(data)) % _MOD
                self.delivered += len(data)
            if not progressed:
                return

    @property
    def has_hole(self) -> bool:
        return bool(self.pending)

    def lose(self) -> None:
        """A hole that will not be filled: stop for good."""
        self.lost = True
        self.pending.clear()
        self.pending_bytes = 0

"""A Fetch answer (or a Produce request) read by the native core (``native/src/digest.rs``): what
the relay road hands Python of a big one instead of its bytes, so that no record crosses into
Python. A Produce request's digest is its body after the header, its first bytes beside it
(``requests.py``, ``RequestDecoder.digested``).

A digest is the answer's body (after the correlation id) with the bytes of every partition's
records taken out, each records field left as an empty one, and the figures the core's walk
gave of each records field taken out, in order (``STATS``: its size, then ``BatchStats``'
fields). The codec parses the skeleton as it parses any answer (``responses.py``,
``ResponseDecoder.digested``); ``restore`` puts each walk's figures back in its partition's
place. An answer the core could not follow comes as an empty skeleton (``NOT_FOLLOWED``).
``tests/protocol/test_digest.py`` holds the two to the codec fed the whole answer.

Must never: read the records (there are none here), do I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from .fetch import FetchResponseInfo
from .primitives import Buf
from .produce import ProduceRequestInfo
from .stream import BatchStats, run_direct

# the core's figures of one records field (``digest.rs``'s ``STATS_WIDTH`` native-endian i64s):
# size, batches, records, first offset, first timestamp, next offset, max timestamp, log-append
# time (0/1), control batches, partial bytes, legacy (0/1)
STATS: Final = struct.Struct("=11q")
# an answer whose layout the core could not follow comes as an empty skeleton (the bytes are not
# kept): reported as not decoded, as the Python road reports the bytes it cannot read
NOT_FOLLOWED: Final = ("the native core could not follow the answer's layout (a length past its end, or a "
                       "malformed field)")


def restore(info: FetchResponseInfo | ProduceRequestInfo, stats: bytes) -> str | None:
    """Each partition of ``info`` (parsed from a skeleton) given the figures of its records, in
    order; what disagrees, if the skeleton and the figures do not pair up (a defect, reported
    as the message's decode failure)."""
    figures = STATS.iter_unpack(stats)
    for p in info.partitions:
        if p.batches is None:
            continue  # null records: none taken out
        got = next(figures, None)
        if got is None or p.batches.size_bytes != 0:
            return "the native core's digest of the message does not pair up with its records"
        size, batches, records, first, first_ts, next_offset, max_ts, log_append, control, partial, legacy = got
        p.batches = BatchStats(size_bytes=size, batches=batches, records=records, first_offset=first,
                               first_timestamp_ms=first_ts, next_offset=next_offset, max_timestamp_ms=max_ts,
                               log_append_time=bool(log_append), control_batches=control, partial_bytes=partial,
                               legacy=bool(legacy))
    if next(figures, None) is not None:
        return "the native core's digest of the message has figures for more records than it names"
    return None


def read(direct: Callable[[Buf], Any], skeleton: bytes, stats: bytes) -> tuple[Any, str | None]:
    """The message a digest stands for: its skeleton parsed by the codec's direct twin
    (``direct``) and its records' figures put back, or (None, why it cannot be read): an empty
    skeleton (``NOT_FOLLOWED``), a skeleton the codec cannot parse, figures that do not pair up."""
    if not skeleton:
        return None, NOT_FOLLOWED
    info, error = run_direct(direct, memoryview(skeleton))
    if info is None:
        return None, error
    error = restore(info, stats)
    return (None, error) if error is not None else (info, None)

//! The record batch headers of a partition's records, walked as `protocol/stream.py`'s `walk`
//! walks them (`walk`, `walk_prefix`: what the digest and the Python road's compiled loops use),
//! and their Python faces (`walk_batches`, `walk_whole`)

use pyo3::prelude::*;

use crate::values::with_range;

/// A record batch header (magic v2) is this long: base offset 8, length 4, leader epoch 4,
/// magic 1, crc 4, attributes 2, last offset delta 4, base and max timestamps 8 + 8, producer
/// id 8, producer epoch 2, base sequence 4, record count 4.
pub const BATCH_HEADER_BYTES: usize = 61;
pub const TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;
pub const CONTROL_BATCH: i16 = 0x20;

/// What the batch headers of a records blob say: `protocol/stream.py`'s `BatchStats` fields
/// but its size, in the order `walk_batches` returns them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batches {
    pub batches: i64,
    pub records: i64,
    pub first_offset: i64,
    pub first_timestamp_ms: i64,
    pub next_offset: i128, // base offset + last offset delta + 1: wider than either
    pub max_timestamp_ms: i64,
    pub log_append_time: bool,
    pub control_batches: i64,
    pub partial_bytes: i64,
    pub legacy: bool,
}

impl Batches {
    /// Nothing walked yet: the offsets and timestamps not known (-1).
    pub(crate) fn new() -> Self {
        Batches { first_offset: -1, first_timestamp_ms: -1, next_offset: -1, max_timestamp_ms: -1, ..Self::default() }
    }

    /// One whole v2 batch, by its header `h` (`BATCH_HEADER_BYTES` long), as `stream.py`'s
    /// `walk` counts it: the first base offset taken while it is negative, control batches
    /// apart from records, the newest batch's timestamp type.
    pub(crate) fn add(&mut self, h: &[u8]) {
        let base = be_i64(h, 0);
        let attrs = be_i16(h, 21);
        let max_ts = be_i64(h, 35);
        self.batches += 1;
        if self.first_offset < 0 {
            self.first_offset = base;
            self.first_timestamp_ms = be_i64(h, 27);
        }
        self.next_offset = base as i128 + be_i32(h, 23) as i128 + 1;
        if attrs & CONTROL_BATCH != 0 {
            self.control_batches += 1;
        } else {
            self.records += be_i32(h, 57) as i64;
        }
        if max_ts > self.max_timestamp_ms {
            self.max_timestamp_ms = max_ts;
        }
        self.log_append_time = attrs & TIMESTAMP_TYPE_LOG_APPEND != 0;
    }
}

/// The whole length of the batch whose header is `h` (its length field plus the 12 bytes before
/// it), or None when that length is shorter than a header's: a length that lies.
pub(crate) fn batch_bytes(h: &[u8]) -> Option<usize> {
    let blen = be_i32(h, 8) as i64;
    if blen < BATCH_HEADER_BYTES as i64 - 12 {
        return None;
    }
    Some((12 + blen) as usize) // >= BATCH_HEADER_BYTES: checked above
}

pub(crate) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(x)
}

/// The walk of `stream.py`'s `walk`, rule for rule, over `blob` (a partition's records, whole):
/// a tail shorter than a header, or a batch whose length runs past the blob, is a partial last
/// batch (normal in fetch responses: the broker cuts at max bytes); a magic other than 2 stops
/// the walk (`legacy`). Every index is inside `blob`: a header is read only when
/// `BATCH_HEADER_BYTES` remain, and a batch is passed over only when its length fits.
pub fn walk(blob: &[u8]) -> Batches {
    let mut s = Batches::new();
    let mut p = 0usize;
    let mut remaining = blob.len();
    while remaining > 0 {
        if remaining < BATCH_HEADER_BYTES {
            s.partial_bytes += remaining as i64;
            break;
        }
        let h = &blob[p..p + BATCH_HEADER_BYTES];
        if h[16] != 2 {
            s.legacy = true;
            break;
        }
        let total = match batch_bytes(h) {
            Some(total) if total <= remaining => total,
            _ => {
                s.partial_bytes += remaining as i64; // the broker cut the last batch short
                break;
            }
        };
        p += total;
        remaining -= total;
        s.add(h);
    }
    s
}

/// `walk`'s rules over the batches that lie whole in `chunk`, in records that go on for
/// `remaining` bytes from its start: it stops before the first batch it cannot settle from the
/// chunk alone (its header or its body not whole in it) and before every case that ends a walk
/// (a tail shorter than a header, another magic, a length that lies): the caller's walk takes
/// those. Returns the bytes passed over and what those batches say.
pub fn walk_prefix(chunk: &[u8], remaining: usize) -> (usize, Batches) {
    let mut s = Batches::new();
    let mut p = 0usize;
    let mut left = remaining;
    while left >= BATCH_HEADER_BYTES && chunk.len() - p >= BATCH_HEADER_BYTES {
        let h = &chunk[p..p + BATCH_HEADER_BYTES];
        if h[16] != 2 {
            break;
        }
        let total = match batch_bytes(h) {
            Some(total) if total <= left && total <= chunk.len() - p => total,
            _ => break,
        };
        p += total;
        left -= total;
        s.add(h);
    }
    (p, s)
}

type BatchesTuple = (i64, i64, i64, i64, i128, i64, bool, i64, i64, bool);
type PrefixTuple = (usize, i64, i64, i64, i64, i128, i64, bool, i64);

/// `walk_prefix` of `buf[start..start + avail]` in records with `remaining` bytes left, as
/// `(passed, batches, records, first_offset, first_timestamp_ms, next_offset,
/// max_timestamp_ms, log_append_time, control_batches)`.
#[pyfunction]
pub fn walk_whole(buf: &Bound<'_, PyAny>, start: usize, avail: usize, remaining: usize) -> PyResult<PrefixTuple> {
    with_range(buf, start, avail, |chunk| {
        let (p, s) = walk_prefix(chunk, remaining);
        (p, s.batches, s.records, s.first_offset, s.first_timestamp_ms, s.next_offset, s.max_timestamp_ms,
         s.log_append_time, s.control_batches)
    })
}

/// `walk` of `buf[start..start + n]` (any buffer of bytes: `bytes`, `bytearray`, `memoryview`),
/// as `(batches, records, first_offset, first_timestamp_ms, next_offset, max_timestamp_ms,
/// log_append_time, control_batches, partial_bytes, legacy)`. A range outside the buffer, or a
/// buffer not contiguous, raises `ValueError`.
#[pyfunction]
pub fn walk_batches(buf: &Bound<'_, PyAny>, start: usize, n: usize) -> PyResult<BatchesTuple> {
    with_range(buf, start, n, |blob| {
        let s = walk(blob);
        (s.batches, s.records, s.first_offset, s.first_timestamp_ms, s.next_offset, s.max_timestamp_ms,
         s.log_append_time, s.control_batches, s.partial_bytes, s.legacy)
    })
}

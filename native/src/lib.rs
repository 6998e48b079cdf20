//! fetchlat's native core: the per-read road of a broker connection, under the Python API.
//!
//! The door is `native/__init__.py`: it loads this module, or says why not (the Python road
//! then runs). What lives here, bytes in and values out:
//!
//! - `StampedRecv.recv(fd)`: one `recvmsg` of a broker socket into a buffer this object owns,
//!   with the kernel's receive time of the last packet it returned (`SO_TIMESTAMPNS`), as
//!   `(bytes, wall_ns)`; what `proxy/stamps.py` does with `recvmsg_into` and the ancillary
//!   data, without the tuples, the list and the struct unpack per read.
//!
//! - `walk_batches(buf, start, n)`: the record batch headers of a fetch partition's records
//!   (`buf[start..start + n]`), what `protocol/stream.py`'s `walk` reads of them, as one tuple:
//!   a fetch of one-record batches pays that walk once per record. `walk_whole(buf, start,
//!   avail, remaining)`: the same over the batches lying whole in a chunk of a frame that
//!   arrives in pieces, up to the first one that does not (the streaming parser takes that one).
//!
//! - `Columns`: one table's trace rows of a batch as columns of machine values (`columns.rs`),
//!   which the trace writer wraps as Arrow arrays without converting a value.
//!
//! - `Wire`: one connection's framing, request headers and correlation, both ways (`wire.rs`),
//!   each exchange a fixed-width record drained in batches: the Python road's rules, held to it
//!   by `tests/protocol/test_wire_native.py`; each read's answer says which of its bytes the
//!   Python road must parse (`protocol/routed.py`, the proxy's road with `FETCHLAT_ROUTED=1`).
//!
//! - `Relay`: a spike, not the proxy's road (`relay.rs`, `bench/spike/native_relay.py`). A
//!   thread of the core's own reads and writes both sides of each connection pair it is
//!   handed, frames each read with that pair's `Wire`, and queues what Python must see, which
//!   Python takes in batches off the per-read road.
//!
//! Every length read from the kernel or the bytes is checked before it is used; nothing here
//! keeps a pointer past the call that made it. `SOURCE` is the core's source, so the door can tell
//! a build made from another version of it (a stale build falls back to Python).

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

mod columns;
mod digest;
mod relay;
mod wire;

/// The core's sources, compiled in (every `src/*.rs` in name order): the door compares them with
/// the checkout's.
const SOURCE: &str = concat!(include_str!("columns.rs"), include_str!("digest.rs"), include_str!("lib.rs"), include_str!("relay.rs"),
                              include_str!("wire.rs"));

/// The most one read returns (uvloop's read buffer and `proxy/stamps.py`'s are the same size).
pub const READ_BYTES: usize = 256 << 10;
/// Room for one control message carrying a `struct timespec`.
const CONTROL_BYTES: usize = 64;
/// Linux's `SO_TIMESTAMPNS` (`SO_TIMESTAMPNS_OLD`), also the control message type it yields.
pub(crate) const SO_TIMESTAMPNS: libc::c_int = 35;

/// What one `recvmsg` gave: the byte count (0: the peer closed), and the kernel's receive time
/// of the last packet (epoch ns) when a control message carried one.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    WouldBlock,
    Data { n: usize, wall_ns: Option<i64> },
}

/// One `recvmsg` of `fd` into `buf`, the stamp parsed from the control messages. Safe to call
/// with any fd: the kernel checks it, and every length it returns is bounded by our buffers.
pub fn recv_stamped(fd: libc::c_int, buf: &mut [u8]) -> std::io::Result<Read> {
    let mut control = [0u64; CONTROL_BYTES / 8]; // aligned for cmsghdr
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: msghdr is plain data; zeroed is its documented empty value
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_BYTES as _;
    loop {
        // SAFETY: msg points at iov and control, which outlive the call; the kernel writes at
        // most iov_len bytes into buf and msg_controllen bytes into control
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
        if n >= 0 {
            let n = n as usize;
            if n > buf.len() {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "recvmsg returned more than asked"));
            }
            return Ok(Read::Data { n, wall_ns: stamp(&msg, &control) });
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(Read::WouldBlock),
            _ => return Err(err),
        }
    }
}

/// The `SO_TIMESTAMPNS` time among the control messages, if any (bounds-checked: a message
/// must lie wholly inside what the kernel filled).
fn stamp(msg: &libc::msghdr, control: &[u64]) -> Option<i64> {
    #[allow(clippy::unnecessary_cast)] // a usize on glibc, a u32 on other C libraries
    let filled = (msg.msg_controllen as usize).min(control.len() * 8);
    let base = control.as_ptr() as usize;
    // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR only compute addresses inside msg_control..+msg_controllen
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    let mut found = None;
    while !cmsg.is_null() {
        let at = cmsg as usize - base;
        if at + std::mem::size_of::<libc::cmsghdr>() > filled {
            break;
        }
        // SAFETY: the header lies inside the filled part of control (checked above)
        let hdr = unsafe { &*cmsg };
        let len = hdr.cmsg_len as usize;
        if len < std::mem::size_of::<libc::cmsghdr>() || at + len > filled {
            break;
        }
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == SO_TIMESTAMPNS {
            // SAFETY: CMSG_DATA points inside this message; its length is checked to hold a timespec
            let data = unsafe { libc::CMSG_DATA(cmsg) } as usize;
            let payload = len - (data - cmsg as usize);
            if payload >= std::mem::size_of::<libc::timespec>() {
                // SAFETY: payload bytes of a timespec lie at data (checked); read unaligned
                let ts: libc::timespec = unsafe { std::ptr::read_unaligned(data as *const libc::timespec) };
                found = Some(ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64);
            }
        }
        // SAFETY: as CMSG_FIRSTHDR
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    found
}

/// The reader of broker sockets: one buffer for the whole process, as `proxy/stamps.py`'s.
#[pyclass(module = "fetchlat.native._core")]
struct StampedRecv {
    buf: Vec<u8>,
}

#[pymethods]
impl StampedRecv {
    #[new]
    fn new() -> Self {
        StampedRecv { buf: vec![0u8; READ_BYTES] }
    }

    /// One read of `fd`: `(bytes, wall_ns)`, `wall_ns` the kernel's receive time of the last
    /// packet (epoch ns) or -1 without one; `(b"", -1)` when the peer closed; `None` when
    /// nothing was there (a spurious wake-up). A failed read raises `OSError(errno, text)`.
    fn recv<'py>(&mut self, py: Python<'py>, fd: i32) -> PyResult<Option<(Bound<'py, PyBytes>, i64)>> {
        match recv_stamped(fd, &mut self.buf) {
            Ok(Read::WouldBlock) => Ok(None),
            Ok(Read::Data { n, wall_ns }) => Ok(Some((PyBytes::new(py, &self.buf[..n]), wall_ns.unwrap_or(-1)))),
            Err(e) => {
                let code = e.raw_os_error().unwrap_or(libc::EIO);
                Err(PyOSError::new_err((code, e.to_string())))
            }
        }
    }
}

/// A record batch header (magic v2) is this long: base offset 8, length 4, leader epoch 4,
/// magic 1, crc 4, attributes 2, last offset delta 4, base and max timestamps 8 + 8, producer
/// id 8, producer epoch 2, base sequence 4, record count 4.
pub const BATCH_HEADER_BYTES: usize = 61;
const TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;
const CONTROL_BATCH: i16 = 0x20;

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

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
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

/// The bytes of `buf` (any contiguous buffer of bytes) from `start`, `start + n` checked to lie
/// inside it. The slice lives no longer than the `PyBuffer` that holds the buffer.
fn with_range<T>(buf: &Bound<'_, PyAny>, start: usize, n: usize, f: impl FnOnce(&[u8]) -> T) -> PyResult<T> {
    let pybuf: PyBuffer<u8> = PyBuffer::get(buf)?;
    if !pybuf.is_c_contiguous() {
        return Err(PyValueError::new_err("the native walk needs a contiguous buffer"));
    }
    let len = pybuf.len_bytes();
    let end = start.checked_add(n).filter(|&e| e <= len)
        .ok_or_else(|| PyValueError::new_err(format!("records [{start}, +{n}) outside a buffer of {len} bytes")))?;
    // SAFETY: the buffer is held (pybuf) for as long as the slice lives, is contiguous and is
    // len bytes long; the GIL is held, so nothing resizes it meanwhile
    let all: &[u8] = unsafe { std::slice::from_raw_parts(pybuf.buf_ptr() as *const u8, len) };
    Ok(f(&all[start..end]))
}

/// `walk_prefix` of `buf[start..start + avail]` in records with `remaining` bytes left, as
/// `(passed, batches, records, first_offset, first_timestamp_ms, next_offset,
/// max_timestamp_ms, log_append_time, control_batches)`.
#[pyfunction]
fn walk_whole(buf: &Bound<'_, PyAny>, start: usize, avail: usize, remaining: usize) -> PyResult<PrefixTuple> {
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
fn walk_batches(buf: &Bound<'_, PyAny>, start: usize, n: usize) -> PyResult<BatchesTuple> {
    with_range(buf, start, n, |blob| {
        let s = walk(blob);
        (s.batches, s.records, s.first_offset, s.first_timestamp_ms, s.next_offset, s.max_timestamp_ms,
         s.log_append_time, s.control_batches, s.partial_bytes, s.legacy)
    })
}

/// `digest.rs`'s digest of `body` (a Fetch answer of `version` after its correlation id), fed in
/// the pieces `cuts` (offsets into it, ascending) cut it into, as `(skeleton, stats)` (`stats`:
/// native-endian i64s, `DIGEST_STATS_WIDTH` per records field), or None where the codec must
/// read the bytes itself: what the relay hands Python of a Fetch answer read in pieces (with
/// `produce`, of a Produce request's body after its header).
#[pyfunction]
#[pyo3(signature = (body, version, cuts=Vec::new(), produce=false))]
fn digest_fetch<'py>(py: Python<'py>, body: &Bound<'_, PyAny>, version: i16, cuts: Vec<usize>, produce: bool)
                     -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let n = PyBuffer::<u8>::get(body)?.len_bytes();
    let got = with_range(body, 0, n, |b| {
        let size = b.len();
        let mut d = if produce { digest::Digester::produce(version, size)? } else { digest::Digester::new(version, size)? };
        let mut at = 0;
        for cut in cuts.iter().copied().chain([b.len()]) {
            let cut = cut.clamp(at, b.len());
            d.feed(&b[at..cut]);
            at = cut;
        }
        d.finish()
    })?;
    Ok(got.map(|d| (PyBytes::new(py, &d.skeleton), i64_bytes(py, &d.stats))))
}

/// `values` as a `bytes` of native-endian i64s (the records and figures the core hands Python).
pub(crate) fn i64_bytes<'py>(py: Python<'py>, values: &[i64]) -> Bound<'py, PyBytes> {
    // SAFETY: an i64 is 8 plain bytes with no padding; the slice lives while `values` does
    let raw: &[u8] = unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 8) };
    PyBytes::new(py, raw)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SOURCE", SOURCE)?;
    m.add("READ_BYTES", READ_BYTES)?;
    m.add_class::<StampedRecv>()?;
    m.add_class::<columns::Columns>()?;
    m.add_class::<wire::PyWire>()?;
    m.add_class::<relay::PyRelay>()?;
    m.add("RELAY_KINDS", (relay::FROM_CLIENT, relay::FROM_BROKER, relay::CLOSED, relay::REWRITE))?;
    m.add("RELAY_GATHER_BYTES", relay::GATHER_BYTES)?;
    m.add("RELAY_ITEM_WIDTH", relay::ITEM_WIDTH)?;
    m.add("RELAY_BATCH_NS", relay::BATCH_NS)?;
    m.add("RELAY_NOTIFY_ITEMS", relay::NOTIFY_ITEMS)?;
    m.add("RELAY_NOTIFY_BYTES", relay::NOTIFY_BYTES)?;
    m.add("RELAY_QUEUE_MAX_ITEMS", relay::QUEUE_MAX_ITEMS)?;
    m.add("RELAY_QUEUE_MAX_BYTES", relay::QUEUE_MAX_BYTES)?;
    m.add("RELAY_SPARE_HELD_BYTES", relay::SPARE_HELD_BYTES)?;
    m.add("RELAY_PRESENT", (relay::HAS_DATA, relay::HAS_RECORDS, relay::HAS_HANDED, relay::HAS_DIGEST, relay::HAS_REASON))?;
    m.add("DIGEST_STATS_WIDTH", digest::STATS_WIDTH)?;
    m.add_function(wrap_pyfunction!(digest_fetch, m)?)?;
    m.add("WIRE_RECORD_WIDTH", wire::RECORD_WIDTH)?;
    m.add("WIRE_FLAGS", (wire::EXPECTS_RESPONSE, wire::OBSERVED, wire::HEADER_UNREADABLE, wire::SASL_V0,
                         wire::ACKS_UNREADABLE))?;
    m.add("WIRE_ROUTED", wire::ROUTED)?;
    m.add("WIRE_ASKED", wire::ASKED)?;
    m.add_function(wrap_pyfunction!(walk_batches, m)?)?;
    m.add_function(wrap_pyfunction!(walk_whole, m)?)?;
    Ok(())
}

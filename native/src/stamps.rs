//! A broker socket's reads stamped by the kernel (`SO_TIMESTAMPNS`): one `recvmsg` with the
//! receive time of the last packet it returned (`recv_stamped`), what `proxy/stamps.py` does
//! with `recvmsg_into` and the ancillary data, and `StampedRecv`, its Python face; and the one
//! rule by which a kernel (wall-clock) stamp goes onto the monotonic clock (`WallOffset`, the
//! rule of `proxy/clock.py`, held to it by `tests/proxy/test_stamps_native.py`)

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The most one read returns (uvloop's read buffer and `proxy/stamps.py`'s are the same size).
pub const READ_BYTES: usize = 256 << 10;

/// Room for one control message carrying a `struct timespec`.
pub const CONTROL_BYTES: usize = 64;

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
pub struct StampedRecv {
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

/// `proxy/clock.py`'s `OFFSET_REFRESH_NS`, `OFFSET_TRIES`, `TIGHT_NS`: the one rule by which a
/// kernel stamp goes onto the monotonic clock, on both roads (the module exports these, and
/// `tests/proxy/test_stamps_native.py` holds them to the Python road's).
pub const OFFSET_REFRESH_NS: i64 = 100_000_000;
pub const OFFSET_TRIES: usize = 3;
pub const TIGHT_NS: i64 = 20_000;

pub fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write into; the clock ids used here always exist on
    // Linux, so the call cannot fail
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

pub fn mono_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock.read_wall_minus_mono_ns`: wall - monotonic as of now, the wall clock read between
/// two monotonic reads and taken at their midpoint; a pair the thread was preempted inside is
/// read again, up to `OFFSET_TRIES` times, and the tightest kept. (One plain pair of reads
/// carries a preemption between them into every stamp until the next read.)
pub fn wall_minus_mono_ns() -> i64 {
    let mut best_gap = -1;
    let mut best = 0;
    for _ in 0..OFFSET_TRIES {
        let m1 = mono_ns();
        let w = clock_ns(libc::CLOCK_REALTIME);
        let m2 = mono_ns();
        let gap = m2 - m1;
        if best_gap < 0 || gap < best_gap {
            best_gap = gap;
            best = w - (m1 + m2) / 2;
        }
        if gap < TIGHT_NS {
            break;
        }
    }
    best
}

/// `clock.WallOffset`: wall - monotonic, read again once `OFFSET_REFRESH_NS` has passed (a clock
/// step or an NTP slew reaches it within 100 ms; a read costs no clock read of its own for it).
pub struct WallOffset {
    read_at_ns: i64,
    offset_ns: i64,
}

impl Default for WallOffset {
    fn default() -> Self {
        WallOffset { read_at_ns: -OFFSET_REFRESH_NS, offset_ns: 0 }
    }
}

impl WallOffset {
    pub fn at(&mut self, mono_now_ns: i64) -> i64 {
        if mono_now_ns - self.read_at_ns >= OFFSET_REFRESH_NS || mono_now_ns < self.read_at_ns {
            self.offset_ns = wall_minus_mono_ns();
            self.read_at_ns = mono_now_ns;
        }
        self.offset_ns
    }

    /// A kernel stamp (`wall_ns`, epoch ns) of a read done by `mono_now_ns`, on the monotonic
    /// clock: never after the read itself.
    pub fn mono_of(&mut self, wall_ns: i64, mono_now_ns: i64) -> i64 {
        (wall_ns - self.at(mono_now_ns)).min(mono_now_ns)
    }
}

/// `wall_minus_mono_ns()` for the tests that hold the two roads to one rule.
#[pyfunction(name = "wall_minus_mono_ns")]
pub fn py_wall_minus_mono_ns() -> i64 {
    wall_minus_mono_ns()
}

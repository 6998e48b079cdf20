//! A connection pair's reads and writes owned by the core: the step of the native road past
//! `Wire` (`docs/architecture.md`, "The native core"): the proxy's road for a sidecar's
//! plaintext connections with `relay: native` (`proxy/relayed.py`), and the spike's
//! (`bench/spike/native_relay.py`; `docs/performance.md`, "A native relay").
//!
//! One thread of its own runs an epoll loop over the connection pairs handed to it (`add`): it
//! reads a side (the broker's with the kernel's receive stamp, `recv_stamped`), frames it with
//! that connection's `Wire`, writes the bytes as read to the other side, and queues for Python
//! what Python must see of the read: the bytes the Python road parses (`Routed`: the held bytes,
//! the spans and the rest, in order, as one buffer) and the records of the exchanges the core
//! settled alone. Python takes the queue in batches (`drain`), off the per-read road, woken by
//! `notify_fd` (an eventfd written when the queue goes from empty to not).
//!
//! Answers to rewrite (`Relay(..., whole=...)`: the rewriter's `wants` as ranges) are held whole:
//! nothing of one, nor of what follows it, goes to the client until Python has answered it
//! (`answer`), the frame it is given going in its place. The whole answer is queued as a
//! `REWRITE` item, and `urgent_fd` is written, so Python answers at once rather than at its
//! next batch; the broker is not read meanwhile. A repeat of an answer Python gave (the same
//! request key and version, the same bytes past the correlation id: a sidecar's every
//! ApiVersions) is answered by the core itself, as Python answered it (`Memo`).
//!
//! What it does not do (the Python road's, where the proxy is): TLS, SASL's raw tokens (after a
//! SaslHandshake v0 the Python road is fed every byte, and only observes), hold a request while
//! the broker connection is not up. A side that errs or sends a frame the `Wire` refuses, or a
//! broker that closes, ends the pair; the queue says why. A client's end of stream is a
//! half-close, passed on: the broker's write side is shut once what waits for it is written, and
//! its answers still go back until it closes too.
//!
//! Back-pressure: bytes a side's socket does not take at once wait in its own queue, and the
//! other side is not read until they are written. Every length the kernel returns is checked
//! against the buffer it was given.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::digest::{Digest, Digester};
use crate::wire::{client_id, Framing, Ranges, Routed, Wire, PEEK_BYTES};
use crate::{i64_bytes, recv_stamped, Read, READ_BYTES};

const CLIENT: u64 = 0;
const BROKER: u64 = 1;
/// The epoll token of the wake-up eventfd (no connection has it: ids start at 1).
const WAKE: u64 = u64::MAX;
const MAX_EVENTS: usize = 64;
/// What `drain` names a queued item's kind by.
pub const FROM_CLIENT: i64 = 0;
pub const FROM_BROKER: i64 = 1;
pub const CLOSED: i64 = 2;
pub const REWRITE: i64 = 3;
/// How many i64s an item's fixed fields take in a drain's `heads` (`PyRelay::drain`).
pub const ITEM_WIDTH: usize = 10;
/// Which of an item's variable parts follow in a drain's `parts` (its `present` field).
pub const HAS_DATA: i64 = 1;
pub const HAS_RECORDS: i64 = 2;
pub const HAS_HANDED: i64 = 4;
pub const HAS_DIGEST: i64 = 8;
pub const HAS_REASON: i64 = 16;

/// A read's records (`Wire`'s layout) and the client ids they index.
type Records = (Vec<i64>, Vec<Arc<[u8]>>);

/// What Python must see of one read, or the end of a pair.
struct Item {
    conn: u64,
    kind: i64,
    t_ns: i64,
    /// when the read's bytes went to the other side's socket (or, where it took only part of
    /// them, when the rest were put aside for it)
    t_written_ns: i64,
    python: Vec<u8>,
    records: Option<Records>,
    reason: String,
    /// a REWRITE's request: (api key, api version)
    api: Option<(i16, i16)>,
    /// the bytes read from the client, and written to it (the broker's, an answer held whole
    /// counted as the answer written in its place), since the pair was added
    counts: (u64, u64),
    /// the `(read, written)` stamps of the earlier reads whose bytes this item gathers (`Gather`)
    handed: Vec<i64>,
    /// the digest of the Fetch answer under way, which ended in this read (`Gather`): Python
    /// takes it before the item's bytes
    digest: Option<Digest>,
}

/// The body of an answer routed to the Python road, gathered over the reads it arrives in
/// (`Routed::open_from`): Python is handed it in one piece when it ends (or every
/// `GATHER_BYTES`), so an answer read in many pieces costs Python one item, not one a read. Its
/// size and correlation id go to Python with the read they end in (the Python road dates an
/// answer's first byte by it).
///
/// A Fetch answer is not gathered but digested as it comes (`digest.rs`, `Digester`): its
/// records are walked where they were read, and Python is handed the digest instead of the
/// bytes; no record crosses into Python, nor is copied.
struct Gather {
    bytes: Vec<u8>,
    /// `(read, written)` of each read gathered
    handed: Vec<i64>,
    /// the digest under way of the Fetch answer, or the Produce request (None: its bytes are
    /// gathered; a Produce's are until its first bytes are in, and then only those are kept)
    digester: Option<Digester>,
    /// a request's first bytes were read for a digest (whether one came of it or not)
    tried: bool,
}

impl Gather {
    fn new(bytes: Vec<u8>) -> Self {
        Gather { bytes, handed: Vec::new(), digester: None, tried: false }
    }
}

/// A request gathered from its size prefix: once its first bytes are in, a Produce the codec
/// reads that is bigger than them goes on as a digest (`Digester::produce`) of its body, and
/// only its size prefix and first bytes stay gathered (for its header, Python's to read).
fn digest_request(g: &mut Gather, wire: &Wire) {
    if g.tried || g.bytes.len() < 4 {
        return;
    }
    let size = u32::from_be_bytes([g.bytes[0], g.bytes[1], g.bytes[2], g.bytes[3]]) as usize;
    let want = size.min(PEEK_BYTES);
    if g.bytes.len() < 4 + want {
        return;
    }
    g.tried = true;
    let Some(h) = wire.header(&g.bytes[4..4 + want]) else { return };
    if h.api_key != PRODUCE || size <= PEEK_BYTES {
        return;
    }
    let Some(mut d) = Digester::produce(h.api_version, size.saturating_sub(h.body_start)) else { return };
    d.feed(&g.bytes[4 + h.body_start..]);
    g.bytes.truncate(4 + want);
    g.digester = Some(d);
}

/// The most of an answer's body gathered before it is handed to Python (the memory a pair holds for it).
pub const GATHER_BYTES: usize = 1 << 20;
/// How long a batch gathers after its first item before Python is woken for it (`notify_fd`; an
/// answer to rewrite wakes it at once, `urgent_fd`). The proxy's own tick (every second,
/// `proxy/server.py`) drains the queue too, so while the event loop keeps its time this wake
/// never comes: it is for a loop that runs late (a fifth of a tick past it). A wake-up of the
/// loop's thread costs it ~230 µs on the development VM, more than a batch's work; at 5 ms a batch
/// (before 2026-12-02) a consume the core relayed woke the loop once a Fetch answer, twice as
/// often as its tick.
pub const BATCH_NS: i64 = 1_200_000_000;
/// The queue's size at which Python is woken at once, whatever the time: the memory it holds
/// stays bounded at any rate (items, and their bytes for Python). At 4 096 items and 4 MiB with
/// the tick once a second, a sidecar carrying one-record produce requests drained up to 4 MiB of
/// them at a time, and its RSS ended 14-18 MB higher than with a tick of 250 ms (121-126 MB
/// against 107, two probes each); at 1 024 and 1 MiB it ended at 104-112.
pub const NOTIFY_ITEMS: usize = 1024;
pub const NOTIFY_BYTES: usize = 1 << 20;
/// The queue's bound: at this many items, or bytes for Python, the relay reads no socket until
/// Python drains it (`Looper::wait_for_drain`). Python is woken at a sixty-fourth of it
/// (`NOTIFY_*`), so only an event loop stalled for that long meets it; the memory the queue
/// holds stays within it (and one read's items) whatever the rate.
pub const QUEUE_MAX_ITEMS: usize = 64 * NOTIFY_ITEMS;
pub const QUEUE_MAX_BYTES: usize = 64 * NOTIFY_BYTES;
/// How often a relay stopped on a full queue looks again without being woken (ms).
const PAUSE_POLL_MS: libc::c_int = 100;
/// How long the relay's thread sleeps with nothing due. It is woken for anything Python asks
/// (a pair to adopt, an answer, an end, the stop: `wake_fd`) and by its sockets, and nothing of
/// its own falls due while no batch is under way (the connections' timers are Python's, read at
/// the tick): this bound is only a backstop. At 200 ms (before 2026-12-03) an idle sidecar's
/// relay thread woke five times a second for nothing.
const IDLE_WAIT_MS: libc::c_int = 5_000;
const FETCH: i16 = 1;
const PRODUCE: i16 = 0;

/// The buffers of drained items, emptied on Python's thread and handed back for the relay's
/// thread to fill again: a connection's per-read buffers are reused, rather than made on the
/// relay's thread and freed on Python's each time (which leaves each thread's allocator holding
/// chunks of the other's arena: the fifteenth soak's free memory rose on this road,
/// `docs/reliability.md`). Beyond `SPARE_KEPT` of a kind, `SPARE_MAX_BYTES` for one buffer, or
/// `SPARE_HELD_BYTES` for them all, they are freed.
#[derive(Default)]
struct Spare {
    bytes: Vec<Vec<u8>>,
    words: Vec<Vec<i64>>,
    ids: Vec<Vec<Arc<[u8]>>>,
    /// the capacity of every buffer kept, in bytes
    held: usize,
}

/// How many of each kind are kept, the largest kept (bigger ones are freed), and the most kept in
/// all. Bounded by count alone (256 of each, up to 256 KiB each), a burst of small produce
/// requests left the pool holding about 20 MB (the relay road's RSS 123 MB after 100 000 of them,
/// against the event loop's 95; `docs/performance.md`). There are two pools (the relay thread's
/// stock and the one Python hands back to), so at most twice this is held.
const SPARE_KEPT: usize = 256;
const SPARE_MAX_BYTES: usize = 256 << 10;
pub const SPARE_HELD_BYTES: usize = 2 << 20;

impl Spare {
    /// Keeps what is worth keeping of the buffers given (emptied).
    fn keep(&mut self, bytes: Vec<Vec<u8>>, words: Vec<Vec<i64>>, ids: Vec<Vec<Arc<[u8]>>>) {
        for mut b in bytes {
            let size = b.capacity();
            if self.bytes.len() < SPARE_KEPT && size > 0 && size <= SPARE_MAX_BYTES && self.room(size) {
                b.clear();
                self.held += size;
                self.bytes.push(b);
            }
        }
        for mut w in words {
            let size = w.capacity() * std::mem::size_of::<i64>();
            if self.words.len() < SPARE_KEPT && size > 0 && size <= SPARE_MAX_BYTES && self.room(size) {
                w.clear();
                self.held += size;
                self.words.push(w);
            }
        }
        for mut i in ids {
            let size = i.capacity() * std::mem::size_of::<Arc<[u8]>>();
            if self.ids.len() < SPARE_KEPT && i.capacity() > 0 && i.capacity() <= 1024 && self.room(size) {
                i.clear();
                self.held += size;
                self.ids.push(i);
            }
        }
    }

    fn room(&self, size: usize) -> bool {
        self.held + size <= SPARE_HELD_BYTES
    }

    fn take_bytes(&mut self) -> Option<Vec<u8>> {
        let b = self.bytes.pop()?;
        self.held -= b.capacity();
        Some(b)
    }

    fn take_records(&mut self) -> (Vec<i64>, Vec<Arc<[u8]>>) {
        let w = self.words.pop().unwrap_or_default();
        let i = self.ids.pop().unwrap_or_default();
        self.held -= w.capacity() * std::mem::size_of::<i64>() + i.capacity() * std::mem::size_of::<Arc<[u8]>>();
        (w, i)
    }
}

/// The relay thread's own stock of spare buffers, refilled from `Shared::spare` when it runs out.
#[derive(Default)]
struct Stock {
    spare: Spare,
}

impl Stock {
    fn refill(&mut self, shared: &Shared) {
        std::mem::swap(&mut self.spare, &mut *shared.spare.lock().unwrap());
    }

    fn bytes(&mut self, shared: &Shared) -> Vec<u8> {
        if self.spare.bytes.is_empty() {
            self.refill(shared);
        }
        self.spare.take_bytes().unwrap_or_default()
    }

    fn records(&mut self, shared: &Shared) -> (Vec<i64>, Vec<Arc<[u8]>>) {
        if self.spare.words.is_empty() || self.spare.ids.is_empty() {
            self.refill(shared);
        }
        self.spare.take_records()
    }
}

/// What Python's timers and counters read of a pair, written by the relay's thread alone.
#[derive(Default)]
struct Stats {
    from_client: AtomicU64,
    from_broker: AtomicU64,
    /// the last read of the client's bytes
    client_read_ns: AtomicI64,
    /// a request begun and not finished since then (0: none)
    partial_since_ns: AtomicI64,
    /// bytes have waited for the client's socket since then (0: none wait)
    stalled_since_ns: AtomicI64,
    /// the kernel's smoothed RTT of the client connection (0: not read yet)
    rtt_ns: AtomicI64,
    rtt_at_ns: AtomicI64,
}

impl Stats {
    fn counts(&self) -> (u64, u64) {
        (self.from_client.load(Ordering::Relaxed), self.from_broker.load(Ordering::Relaxed))
    }
}

/// The kernel's smoothed RTT of a TCP socket in ns (Linux `TCP_INFO`'s `tcpi_rtt`, in µs), or None.
fn tcp_rtt_ns(fd: RawFd) -> Option<i64> {
    let mut info = [0u8; 104];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info` and says how many
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len) };
    if r != 0 || (len as usize) < TCP_INFO_RTT_OFFSET + 4 {
        return None;
    }
    let raw: [u8; 4] = info[TCP_INFO_RTT_OFFSET..TCP_INFO_RTT_OFFSET + 4].try_into().ok()?;
    Some(i64::from(u32::from_ne_bytes(raw)) * 1000)
}

/// struct tcp_info: 8 u8 fields, then u32s; tcpi_rtt is the 16th (as `proxy/session.py` reads it)
const TCP_INFO_RTT_OFFSET: usize = 68;
/// how often the client connection's RTT is read (as the asyncio road: once a second at most)
const RTT_EVERY_NS: i64 = 1_000_000_000;

/// What waits for a side's socket, in order.
enum Seg {
    Bytes(Vec<u8>),
    /// an answer held whole: `asked` once it is whole and Python has it (`answer` replaces it);
    /// `key` what the memo would know it by (its request's key and version, its bytes past the
    /// correlation id)
    Answer { asked: bool, key: Option<(i16, i16, Vec<u8>)> },
}

/// Python's answers to the answers held whole, by what they answered: a repeat (the same api,
/// version and bytes past the correlation id: every connection's ApiVersions) is answered by the
/// core at once, with the repeat's own correlation id, as Python answered the first.
/// `MEMO_ENTRIES` answers at most, each of `MEMO_MAX_BYTES` at most (the rewriter's own cache's bounds).
struct Memo {
    entries: VecDeque<Remembered>,
}

struct Remembered {
    api: (i16, i16),
    asked: Vec<u8>,
    answer: Vec<u8>,
    rewritten: bool,
}

const MEMO_ENTRIES: usize = 64;
const MEMO_MAX_BYTES: usize = 256 << 10;

impl Memo {
    /// The frame (size prefix included) answering `whole` (a held answer, size prefix included),
    /// if Python answered the same before; and whether that answer was a rewrite.
    fn answer(&self, api: (i16, i16), whole: &[u8]) -> Option<(Vec<u8>, bool)> {
        let body = whole.get(8..)?;
        let m = self.entries.iter().find(|m| m.api == api && m.asked == body)?;
        let mut frame = Vec::with_capacity(8 + m.answer.len());
        frame.extend_from_slice(&((4 + m.answer.len()) as u32).to_be_bytes());
        frame.extend_from_slice(&whole[4..8]);
        frame.extend_from_slice(&m.answer);
        Some((frame, m.rewritten))
    }

    fn remember(&mut self, key: (i16, i16, Vec<u8>), frame: &[u8]) {
        let (k, v, asked) = key;
        let Some(answer) = frame.get(8..) else { return };
        if asked.len() > MEMO_MAX_BYTES || answer.len() > MEMO_MAX_BYTES
            || self.entries.iter().any(|m| m.api == (k, v) && m.asked == asked) {
            return;
        }
        if self.entries.len() >= MEMO_ENTRIES {
            self.entries.pop_front(); // the oldest
        }
        let rewritten = answer != asked.as_slice();
        self.entries.push_back(Remembered { api: (k, v), asked, answer: answer.to_vec(), rewritten });
    }
}

struct Side {
    fd: RawFd,
    queue: VecDeque<Seg>,
}

impl Side {
    /// This side's queue lets the other side be read: nothing waits, or only an answer held
    /// whole that is still arriving (its rest must be read).
    fn lets_other_read(&self) -> bool {
        matches!((self.queue.len(), self.queue.front()), (0, _) | (1, Some(Seg::Answer { asked: false, .. })))
    }

    /// Writes what it can of the queue, up to an answer not given yet.
    fn flush(&mut self) -> std::io::Result<()> {
        while let Some(seg) = self.queue.front_mut() {
            let Seg::Bytes(v) = seg else { return Ok(()) };
            let k = write_some(self.fd, v)?;
            if k < v.len() {
                v.drain(..k);
                return Ok(());
            }
            self.queue.pop_front();
        }
        Ok(())
    }
}

struct Pair {
    client: Side,
    broker: Side,
    /// the answer held whole so far
    whole: Vec<u8>,
    /// the epoll interest set for the client's and the broker's socket
    armed: [u32; 2],
    wire: Wire,
    stats: Arc<Stats>,
    /// the client ended its stream (a half-close): it is not read again, and the broker's write
    /// side is shut once what waits for it is written (`shut`), as the event loop passes it on
    client_eof: bool,
    shut: bool,
    /// the body so far of the broker's answer under way that the Python road parses
    gather: Option<Gather>,
    /// the bytes so far of the client's request under way that the Python road parses
    gather_rq: Option<Gather>,
    /// the broker is gone (why) while bytes were still owed to the client: its socket is out of
    /// the epoll set, and the pair ends once the client has them all
    broker_gone: Option<String>,
}

struct Shared {
    queue: Mutex<Vec<Item>>,
    /// the queue's buffer from the drain before the last, emptied, for the next drain to swap in
    queue_spare: Mutex<Vec<Item>>,
    /// buffers of drained items, for the relay's thread to fill again (`Spare`)
    spare: Mutex<Spare>,
    /// pairs handed over and not adopted yet; None once the relay's thread has ended (`add` is
    /// refused from then: nothing would own the fds)
    added: Mutex<Option<Vec<(u64, RawFd, RawFd)>>>,
    answers: Mutex<Vec<(u64, Vec<u8>)>>,
    /// pairs Python ends (`end`)
    ends: Mutex<Vec<u64>>,
    stats: Mutex<HashMap<u64, Arc<Stats>>>,
    /// reads of broker sockets stamped by the kernel, and by the clock (no stamp came with them)
    kernel_reads: AtomicU64,
    clock_reads: AtomicU64,
    /// the answers the memo rewrote, by api key
    memo_rewrites: Mutex<HashMap<i16, u64>>,
    stop: AtomicBool,
    /// when Python is to be woken for the batch under way (monotonic ns; 0: no batch under way,
    /// which `drain` sets), and the bytes for Python queued since the last drain
    notify_at: AtomicI64,
    queued_bytes: AtomicUsize,
    queued_items: AtomicUsize,
    /// how often the queue was full and the relay stopped reading until Python drained it, and
    /// whether it is stopped now (`drain` wakes it)
    queue_full: AtomicU64,
    paused: AtomicBool,
    /// the queue's bound: items, bytes for Python (`QUEUE_MAX_*` unless the tests ask less)
    queue_max: (usize, usize),
    wake_fd: RawFd,
    notify_fd: RawFd,
    urgent_fd: RawFd,
}

fn mono_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write into
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Wakes whoever waits on an eventfd. Its only failure, EAGAIN (the counter at its top), leaves
/// the eventfd readable, which is all a wake is; any other is a bug of ours (a closed fd).
fn bump(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a u64 that lives for the call; an eventfd takes exactly that
    let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    debug_assert!(n == 8 || std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock);
}

/// Reads an eventfd's count (clears it): EAGAIN (nothing there) is a wake that another read took.
fn clear(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads the eventfd's 8 bytes into a u64
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    debug_assert!(n == 8 || std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock);
}

fn epoll_set(ep: RawFd, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> std::io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: ev lives for the call; the kernel checks the fds
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `fcntl(F_SETFL, O_NONBLOCK)`: a socket the relay reads must never block its thread.
fn nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: no pointers; the kernel checks the fd
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `setsockopt` of an int option to 1.
fn sockopt_on(fd: RawFd, level: libc::c_int, name: libc::c_int) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid option value for the call's duration
    let r = unsafe { libc::setsockopt(fd, level, name, (&on as *const libc::c_int).cast(), 4) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Writes what it can of `data` to `fd`: the count written, or the error (EAGAIN is 0 written).
fn write_some(fd: RawFd, data: &[u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < data.len() {
        // SAFETY: the pointer and length are a live slice's
        let n = unsafe { libc::send(fd, data[done..].as_ptr().cast(), data.len() - done, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            match err.kind() {
                std::io::ErrorKind::WouldBlock => return Ok(done),
                std::io::ErrorKind::Interrupted => continue,
                _ => return Err(err),
            }
        }
        done += (n as usize).min(data.len() - done);
    }
    Ok(done)
}

/// Each side's epoll interest: read it while the other side has nothing waiting for its socket
/// (back-pressure), and wait to write to it while it has.
/// (Only what changed since the last call: the common read changes nothing, and costs no call.)
fn rearm(ep: RawFd, id: u64, p: &mut Pair) -> Result<(), String> {
    let sides = [(CLIENT, &p.client, &p.broker), (BROKER, &p.broker, &p.client)];
    for (i, (side, me, other)) in sides.into_iter().enumerate() {
        if side == BROKER && p.broker_gone.is_some() {
            continue; // out of the epoll set
        }
        let mut ev = 0u32;
        if other.lets_other_read() && !(side == CLIENT && p.client_eof) {
            ev |= libc::EPOLLIN as u32;
        }
        if matches!(me.queue.front(), Some(Seg::Bytes(_))) {
            ev |= libc::EPOLLOUT as u32;
        }
        if p.armed[i] != ev {
            p.armed[i] = ev;
            epoll_set(ep, libc::EPOLL_CTL_MOD, me.fd, ev, id << 1 | side).map_err(|e| format!("relay epoll: {e}"))?;
        }
    }
    if p.client_eof && !p.shut && p.broker.queue.is_empty() && p.broker_gone.is_none() {
        p.shut = true;
        // SAFETY: the pair's own fd
        if unsafe { libc::shutdown(p.broker.fd, libc::SHUT_WR) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTCONN) {
                return Err(format!("passing the client's end of stream to the broker: {e}"));
            }
        }
    }
    let waits = matches!(p.client.queue.front(), Some(Seg::Bytes(_)));
    let since = &p.stats.stalled_since_ns;
    if waits != (since.load(Ordering::Relaxed) != 0) {
        since.store(if waits { mono_ns() } else { 0 }, Ordering::Relaxed);
    }
    Ok(())
}

/// The bytes of `data` the Python road is fed (`Routed`), after `v`'s, up to offset `upto` of the
/// chunk (`data.len()` or more: all of them).
fn routed_bytes(mut v: Vec<u8>, data: &[u8], out: &Routed, upto: usize) -> Vec<u8> {
    let upto = upto.min(data.len());
    let rest = out.rest.unwrap_or(data.len()).min(upto);
    v.reserve(out.held.len() + out.spans.iter().map(|&(a, b)| b.min(rest) - a.min(rest)).sum::<usize>()
              + (upto - rest));
    v.extend_from_slice(&out.held);
    for &(a, b) in &out.spans {
        v.extend_from_slice(&data[a.min(rest)..b.min(rest)]);
    }
    v.extend_from_slice(&data[rest..upto]);
    v
}

/// The digest of the message under way that ended in this read (`Routed::ended_at`): its last
/// bytes, the read's first, fed and taken out of what is routed. One the core could not follow
/// is an empty skeleton, which the Python road reports as not decoded.
fn digest_ended(mut d: Digester, data: &[u8], out: &mut Routed) -> Digest {
    let end = out.ended_at.unwrap_or(0).min(data.len());
    d.feed(&data[..end]);
    out.spans.retain_mut(|span| { span.0 = span.0.max(end); span.0 < span.1 });
    d.finish().unwrap_or_default()
}

/// The item that hands Python an answer's body gathered so far: dated by its last read, with the
/// stamps of the reads before it; None when nothing was gathered (or it is digested).
fn gathered(conn: u64, mut g: Gather, counts: (u64, u64)) -> Option<Item> {
    if g.handed.len() < 2 || g.digester.is_some() {
        return None;
    }
    let t_written_ns = g.handed.pop().unwrap_or(0);
    let t_ns = g.handed.pop().unwrap_or(0);
    Some(Item { conn, kind: FROM_BROKER, t_ns, t_written_ns, python: g.bytes, records: None, reason: String::new(),
                api: None, counts, handed: g.handed, digest: None })
}

struct Looper {
    shared: Arc<Shared>,
    ep: RawFd,
    pairs: HashMap<u64, Pair>,
    buf: Vec<u8>,
    max_frame: i64,
    flexible: Ranges,
    observed: Ranges,
    whole: Vec<(i16, i16, i16)>,
    memo: Memo,
    stock: Stock,
    /// each pair's `Wire::ask_at_answer`: an exchange the core settles alone queues one record
    ask_at_answer: bool,
}

impl Looper {
    fn push(&self, item: Item) {
        let urgent = item.kind == REWRITE;
        // a pair's end wakes Python soon: its connection's close is not left for the tick
        let soon = item.kind == CLOSED;
        let size = item.python.len() + item.digest.as_ref().map_or(0, |d| d.head.len() + d.skeleton.len());
        let mut q = self.shared.queue.lock().unwrap();
        q.push(item);
        let items = q.len();
        drop(q);
        self.shared.queued_items.store(items, Ordering::Relaxed);
        // urgent first: Python, woken by either, must find it set whenever the item is there
        if urgent {
            bump(self.shared.urgent_fd);
        }
        let before = self.shared.queued_bytes.fetch_add(size, Ordering::Relaxed);
        if soon || items == NOTIFY_ITEMS || (before < NOTIFY_BYTES && before + size >= NOTIFY_BYTES) {
            bump(self.shared.notify_fd);
        }
        if self.shared.notify_at.load(Ordering::Relaxed) == 0 {
            // Python is woken once a batch, `BATCH_NS` after its first item (`run` keeps the
            // time), unless its tick drained the batch first
            self.shared.notify_at.store(mono_ns() + BATCH_NS, Ordering::Relaxed);
        }
    }

    /// The batch under way is due: Python is woken for it.
    fn notify_due(&self) {
        let at = self.shared.notify_at.load(Ordering::Relaxed);
        if at != 0 && mono_ns() >= at
            && self.shared.notify_at.compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            bump(self.shared.notify_fd);
        }
    }

    /// How long `epoll_wait` may sleep (ms): until the batch under way is due, or `IDLE_WAIT_MS`.
    fn wait_ms(&self) -> libc::c_int {
        match Some(self.shared.notify_at.load(Ordering::Relaxed)).filter(|&at| at != 0) {
            Some(at) => ((at - mono_ns()).max(0) as u64).div_ceil(1_000_000).min(IDLE_WAIT_MS as u64) as libc::c_int,
            None => IDLE_WAIT_MS,
        }
    }

    fn close(&mut self, id: u64, reason: String) {
        if let Some(mut p) = self.pairs.remove(&id) {
            self.shared.stats.lock().unwrap().remove(&id);
            for fd in [p.client.fd, p.broker.fd] {
                // SAFETY: the pair owned these fds; removing it from the map gives them up once.
                // Closing the fd takes it out of the epoll set whatever the DEL says (ENOENT for
                // a broker already taken out: `broker_hung_up`); close's own error (EINTR, EIO)
                // leaves nothing to do, the fd being released either way on Linux.
                unsafe {
                    libc::epoll_ctl(self.ep, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
                    libc::close(fd);
                }
            }
            if let Some(g) = p.gather_rq {
                // what the Python road would have been fed of the request cut short
                let t = mono_ns();
                self.push(Item { conn: id, kind: FROM_CLIENT, t_ns: t, t_written_ns: t, python: g.bytes, records: None,
                                 reason: String::new(), api: None, counts: p.stats.counts(), handed: Vec::new(),
                                 digest: None });
            }
            if let Some(g) = p.gather {
                // what the Python road would have been fed of the answer cut short
                if let Some(item) = gathered(id, g, p.stats.counts()) {
                    self.push(item);
                }
            }
            // the requests no answer will stand for (`Wire::ask_at_answer`), counted as they were
            p.wire.unanswered();
            if let Some(records) = p.wire.drain_native() {
                let t = mono_ns();
                self.push(Item { conn: id, kind: FROM_CLIENT, t_ns: t, t_written_ns: t, python: Vec::new(),
                                 records: Some(records), reason: String::new(), api: None, counts: p.stats.counts(),
                                 handed: Vec::new(), digest: None });
            }
            let t = mono_ns();
            self.push(Item { conn: id, kind: CLOSED, t_ns: t, t_written_ns: t, python: Vec::new(), records: None,
                             reason, api: None, counts: p.stats.counts(), handed: Vec::new(), digest: None });
        }
    }

    fn adopt(&mut self) {
        let added = match self.shared.added.lock().unwrap().as_mut() {
            Some(v) => std::mem::take(v),
            None => Vec::new(),
        };
        self.adopt_pairs(added);
    }

    fn adopt_pairs(&mut self, added: Vec<(u64, RawFd, RawFd)>) {
        for (id, cfd, bfd) in added {
            // the kernel's stamps: without them the broker's reads are dated by the clock (and
            // counted so, `stamps`); without TCP_NODELAY small answers may wait for Nagle: neither
            // ends the pair. A socket that cannot be made non-blocking, or watched, is refused.
            let _stamped = sockopt_on(bfd, libc::SOL_SOCKET, crate::SO_TIMESTAMPNS);
            let _nodelay = (sockopt_on(cfd, libc::IPPROTO_TCP, libc::TCP_NODELAY),
                            sockopt_on(bfd, libc::IPPROTO_TCP, libc::TCP_NODELAY));
            let set_up = nonblocking(cfd).and_then(|()| nonblocking(bfd))
                .and_then(|()| epoll_set(self.ep, libc::EPOLL_CTL_ADD, cfd, libc::EPOLLIN as u32, id << 1 | CLIENT))
                .and_then(|()| epoll_set(self.ep, libc::EPOLL_CTL_ADD, bfd, libc::EPOLLIN as u32, id << 1 | BROKER));
            if let Err(e) = set_up {
                // SAFETY: fds handed over by add(), owned here alone; closing takes them out of the set
                unsafe {
                    libc::close(cfd);
                    libc::close(bfd);
                }
                let t = mono_ns();
                self.push(Item { conn: id, kind: CLOSED, t_ns: t, t_written_ns: t, python: Vec::new(), records: None,
                                 reason: format!("relay could not take the connection: {e}"), api: None,
                                 counts: (0, 0), handed: Vec::new(), digest: None });
                continue;
            }
            let mut wire = Wire::new(self.max_frame, self.flexible.clone(), self.observed.clone());
            wire.hold_whole(&self.whole);
            if self.ask_at_answer {
                wire.ask_at_answer();
            }
            let stats = Arc::new(Stats::default());
            stats.client_read_ns.store(mono_ns(), Ordering::Relaxed);
            self.shared.stats.lock().unwrap().insert(id, stats.clone());
            self.pairs.insert(id, Pair { client: Side { fd: cfd, queue: VecDeque::new() },
                                         broker: Side { fd: bfd, queue: VecDeque::new() }, whole: Vec::new(),
                                         armed: [libc::EPOLLIN as u32; 2], wire, stats, client_eof: false,
                                         shut: false, gather: None, gather_rq: None, broker_gone: None });
        }
    }

    /// A side is readable: one read, framed, written on, queued for Python.
    fn readable(&mut self, id: u64, side: u64) {
        let mut items = Vec::new();
        match self.read_one(id, side, &mut items) {
            Ok(()) => {
                for item in items {
                    self.push(item);
                }
            }
            Err(reason) => self.close(id, reason),
        }
    }

    /// `readable`'s work: the items to queue, or why the pair ends.
    fn read_one(&mut self, id: u64, side: u64, items: &mut Vec<Item>) -> Result<(), String> {
        let Some(p) = self.pairs.get_mut(&id) else { return Ok(()) };
        let (from, to) = if side == CLIENT { (&p.client, &mut p.broker) } else { (&p.broker, &mut p.client) };
        let (n, t_ns) = if side == BROKER {
            match recv_stamped(from.fd, &mut self.buf) {
                Ok(Read::WouldBlock) => return Ok(()),
                Ok(Read::Data { n, wall_ns }) => {
                    let now = mono_ns();
                    let source = if wall_ns.is_some() { &self.shared.kernel_reads } else { &self.shared.clock_reads };
                    source.fetch_add(1, Ordering::Relaxed);
                    // the kernel's wall stamp onto the monotonic clock, never after the read itself
                    let t = wall_ns.map_or(now, |w| (w - (clock_ns(libc::CLOCK_REALTIME) - now)).min(now));
                    (n, t)
                }
                Err(e) => return Err(format!("broker read: {e}")),
            }
        } else {
            // SAFETY: reads at most buf.len() bytes into buf
            let r = unsafe { libc::recv(from.fd, self.buf.as_mut_ptr().cast(), self.buf.len(), 0) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) {
                    return Ok(());
                }
                return Err(format!("client read: {e}"));
            }
            ((r as usize).min(self.buf.len()), mono_ns())
        };
        if n == 0 {
            if side == CLIENT {
                p.client_eof = true;  // a half-close, passed on: the answers still come back
                return rearm(self.ep, id, p);
            }
            return Err(if p.client_eof { "broker closed the connection after the client's end of stream".into() }
                       else { "broker closed the connection".into() });
        }
        let data = &self.buf[..n];
        let mut out = Routed::default();
        let framed = if side == CLIENT { p.wire.from_client(data, t_ns, &mut out) }
                     else { p.wire.from_broker(data, t_ns, &mut out) };
        framed.map_err(|Framing(m)| m)?;
        let stats = &p.stats;
        if side == CLIENT {
            stats.from_client.fetch_add(n as u64, Ordering::Relaxed);
            stats.client_read_ns.store(t_ns, Ordering::Relaxed);
            let partial = &stats.partial_since_ns;
            if !p.wire.client_mid_frame() {
                partial.store(0, Ordering::Relaxed);
            } else if partial.load(Ordering::Relaxed) == 0 {
                partial.store(t_ns, Ordering::Relaxed);
            }
        } else {
            // what goes to the client: an answer held whole is counted when its answer is written in its place
            let held: usize = out.whole.iter().map(|&(start, end, _)| end - start).sum();
            stats.from_broker.fetch_add((n - held.min(n)) as u64, Ordering::Relaxed);
        }
        let write_err = if side == CLIENT { "write to the broker" } else { "write to the client" };
        // the bytes as read go on first (but for answers held whole); what Python must see of them after
        if out.whole.is_empty() && to.queue.is_empty() {
            let k = write_some(to.fd, data).map_err(|e| format!("{write_err}: {e}"))?;
            if k < n {
                to.queue.push_back(Seg::Bytes(data[k..].to_vec()));
            }
        } else {
            let mut at = 0;
            for &(start, end, ends) in &out.whole {
                if start > at {
                    to.queue.push_back(Seg::Bytes(data[at..start].to_vec()));
                }
                if p.whole.is_empty() {
                    to.queue.push_back(Seg::Answer { asked: false, key: None });
                }
                p.whole.extend_from_slice(&data[start..end]);
                if let Some(api) = ends {
                    let whole = std::mem::take(&mut p.whole);
                    let known = self.memo.answer(api, &whole);
                    let slot = to.queue.iter_mut().rev().find(|s| matches!(s, Seg::Answer { .. }));
                    match (known, slot) {
                        (Some((frame, rewritten)), Some(slot)) => {
                            p.stats.from_broker.fetch_add(frame.len() as u64, Ordering::Relaxed);
                            *slot = Seg::Bytes(frame);
                            if rewritten {
                                *self.shared.memo_rewrites.lock().unwrap().entry(api.0).or_insert(0) += 1;
                            }
                        }
                        (_, slot) => {
                            if let Some(Seg::Answer { asked, key }) = slot {
                                *asked = true;
                                *key = whole.get(8..).map(|b| (api.0, api.1, b.to_vec()));
                            }
                            items.push(Item { conn: id, kind: REWRITE, t_ns, t_written_ns: t_ns, python: whole,
                                              records: None, reason: String::new(), api: Some(api), counts: (0, 0),
                                              handed: Vec::new(), digest: None });
                        }
                    }
                }
                at = end;
            }
            if at < n {
                to.queue.push_back(Seg::Bytes(data[at..].to_vec()));
            }
            to.flush().map_err(|e| format!("{write_err}: {e}"))?;
        }
        rearm(self.ep, id, p)?;
        let t_written_ns = mono_ns();
        if side == BROKER && t_written_ns - p.stats.rtt_at_ns.load(Ordering::Relaxed) > RTT_EVERY_NS {
            p.stats.rtt_at_ns.store(t_written_ns, Ordering::Relaxed);
            if let Some(rtt) = tcp_rtt_ns(p.client.fd) {
                p.stats.rtt_ns.store(rtt, Ordering::Relaxed);
            }
        }
        let records = if p.wire.has_native_records() {
            let (fresh_records, fresh_ids) = self.stock.records(&self.shared);
            p.wire.drain_native_into(fresh_records, fresh_ids)
        } else {
            p.wire.drain_native()
        };
        let kind = if side == CLIENT { FROM_CLIENT } else { FROM_BROKER };
        if side == CLIENT {
            // a request the Python road parses that goes on past this read is gathered (whole, up
            // to GATHER_BYTES), a big Produce digested: the Python road dates a request by its
            // last byte, and parses it whole
            let open = if out.rest.is_none() { out.open_from } else { None };
            let gathered_before = p.gather_rq.take();
            if open == Some(0) {
                // the request gathered (or one begun in an earlier read) goes on through the whole read
                let mut g = gathered_before.unwrap_or_else(|| Gather::new(self.stock.bytes(&self.shared)));
                match g.digester.as_mut() {
                    Some(d) => d.feed(data), // its route was known before: nothing `held`
                    None => {
                        g.bytes = routed_bytes(std::mem::take(&mut g.bytes), data, &out, n);
                        digest_request(&mut g, &p.wire);
                    }
                }
                let counts = p.stats.counts();
                if g.digester.is_none() && g.bytes.len() >= GATHER_BYTES {
                    items.push(Item { conn: id, kind, t_ns, t_written_ns: t_ns, python: g.bytes, records,
                                      reason: String::new(), api: None, counts, handed: Vec::new(), digest: None });
                    return Ok(());
                }
                p.gather_rq = Some(g);
                if records.is_some() {
                    items.push(Item { conn: id, kind, t_ns, t_written_ns: t_ns, python: Vec::new(), records,
                                      reason: String::new(), api: None, counts, handed: Vec::new(), digest: None });
                }
                return Ok(());
            }
            // the request gathered ended in this read: it (or its digest) first, then the rest routed
            let mut digested = None;
            let before = match gathered_before {
                Some(Gather { bytes, digester: Some(d), .. }) => {
                    digested = Some(Digest { head: bytes, ..digest_ended(d, data, &mut out) });
                    Vec::new()
                }
                Some(g) => g.bytes,
                None => Vec::new(),
            };
            let before = if before.is_empty() && !out.is_empty() { self.stock.bytes(&self.shared) } else { before };
            let python = if out.is_empty() { before } else { routed_bytes(before, data, &out, open.unwrap_or(n)) };
            if let Some(q) = open {
                let mut g = Gather::new(self.stock.bytes(&self.shared));
                g.bytes.extend_from_slice(&data[q..]);
                digest_request(&mut g, &p.wire);
                p.gather_rq = Some(g);
            }
            if python.is_empty() && records.is_none() && digested.is_none() {
                return Ok(());
            }
            items.push(Item { conn: id, kind, t_ns, t_written_ns, python, records, reason: String::new(), api: None,
                              counts: p.stats.counts(), handed: Vec::new(), digest: digested });
            return Ok(());
        }
        let open = if out.rest.is_none() { out.open_from } else { None };
        if let (Some(g), Some(0)) = (p.gather.as_mut(), open) {
            // the answer gathered goes on through the whole read
            g.handed.extend_from_slice(&[t_ns, t_written_ns]);
            match g.digester.as_mut() {
                Some(d) => d.feed(data),
                None => {
                    g.bytes = routed_bytes(std::mem::take(&mut g.bytes), data, &out, n);
                    if g.bytes.len() >= GATHER_BYTES {
                        let g = std::mem::replace(g, Gather::new(Vec::new()));
                        items.extend(gathered(id, g, p.stats.counts()));
                    }
                }
            }
            return Ok(());
        }
        // an answer gathered that ended in this read: its body (or its digest) first, then the
        // rest of what is routed
        let mut before = Vec::new();
        let mut digested = None;
        let handed = match p.gather.take() {
            Some(g) => {
                match g.digester {
                    Some(d) => digested = Some(digest_ended(d, data, &mut out)),
                    None => before = g.bytes,
                }
                g.handed
            }
            None => Vec::new(),
        };
        if before.is_empty() && !out.is_empty() {
            before = self.stock.bytes(&self.shared); // a spare buffer, filled by routed_bytes
        }
        let python = if out.is_empty() { before } else { routed_bytes(before, data, &out, open.unwrap_or(n)) };
        if let Some(q) = open {
            // an answer the Python road parses begins its body here: a Fetch answer's digested
            // from here on, another's gathered
            let body = (n - q).saturating_add(p.wire.answer_left());
            let digester = p.wire.answer_api().and_then(|(k, v)| if k == FETCH { Digester::new(v, body) } else { None });
            let mut bytes = Vec::new();
            match digester {
                Some(mut d) => {
                    d.feed(&data[q..]);
                    p.gather = Some(Gather { digester: Some(d), ..Gather::new(bytes) });
                }
                None => {
                    bytes.reserve(p.wire.answer_left().saturating_add(n - q).min(GATHER_BYTES));
                    bytes.extend_from_slice(&data[q..]);
                    p.gather = Some(Gather::new(bytes));
                }
            }
        }
        if python.is_empty() && records.is_none() && digested.is_none() {
            return Ok(());
        }
        items.push(Item { conn: id, kind, t_ns, t_written_ns, python, records, reason: String::new(), api: None,
                          counts: p.stats.counts(), handed, digest: digested });
        Ok(())
    }

    /// A side that had bytes waiting can take more.
    fn writable(&mut self, id: u64, side: u64) {
        let Some(p) = self.pairs.get_mut(&id) else { return };
        let (to, what) = if side == CLIENT { (&mut p.client, "client") } else { (&mut p.broker, "broker") };
        if let Err(e) = to.flush() {
            return self.close(id, format!("write to the {what}: {e}"));
        }
        if let Err(e) = rearm(self.ep, id, p) {
            return self.close(id, e);
        }
        self.owed_done(id);
    }

    /// A pair whose broker hung up while bytes were owed to the client: once they are written,
    /// its socket is watched again, to be read to its end (what the kernel still holds of it
    /// is owed too); the read of its end closes the pair.
    fn owed_done(&mut self, id: u64) {
        let Some(p) = self.pairs.get_mut(&id) else { return };
        if p.broker_gone.is_none() || !p.client.queue.is_empty() {
            return;
        }
        let ev = libc::EPOLLIN as u32;
        if let Err(e) = epoll_set(self.ep, libc::EPOLL_CTL_ADD, p.broker.fd, ev, id << 1 | BROKER) {
            return self.close(id, format!("relay epoll: {e}"));
        }
        p.broker_gone = None;
        p.armed[1] = ev;
    }

    /// The broker's socket hung up (`reason`): with bytes still owed to the client the pair goes
    /// on until they are written (the broker's socket out of the epoll set, which reports a
    /// hang-up whatever it is asked), and then its socket is read to its end; otherwise it ends.
    fn broker_hung_up(&mut self, id: u64, reason: String) {
        let Some(p) = self.pairs.get_mut(&id) else { return };
        if p.client.queue.is_empty() || p.broker_gone.is_some() {
            return self.close(id, reason);
        }
        // SAFETY: the pair's own fds, still open
        if unsafe { libc::epoll_ctl(self.ep, libc::EPOLL_CTL_DEL, p.broker.fd, std::ptr::null_mut()) } < 0 {
            let e = std::io::Error::last_os_error();
            return self.close(id, format!("relay epoll: {e}"));
        }
        p.broker_gone = Some(reason);
    }

    /// Python's answers to the answers held whole, each in its place.
    fn answered(&mut self) {
        let answers = std::mem::take(&mut *self.shared.answers.lock().unwrap());
        for (id, frame) in answers {
            let Some(p) = self.pairs.get_mut(&id) else { continue };
            let slot = p.client.queue.iter_mut().find(|s| matches!(s, Seg::Answer { asked: true, .. }));
            let Some(slot) = slot else { continue }; // nothing asked: an answer to nothing is dropped
            if let Seg::Answer { key: Some(key), .. } = std::mem::replace(slot, Seg::Bytes(Vec::new())) {
                self.memo.remember(key, &frame);
            }
            p.stats.from_broker.fetch_add(frame.len() as u64, Ordering::Relaxed);
            *slot = Seg::Bytes(frame);
            if let Err(e) = p.client.flush() {
                self.close(id, format!("write to the client: {e}"));
                continue;
            }
            if let Err(e) = rearm(self.ep, id, p) {
                self.close(id, e);
                continue;
            }
            self.owed_done(id);
        }
    }

    /// What Python asked for (`wake_fd`): pairs to adopt, answers, ends.
    fn woken(&mut self) {
        clear(self.shared.wake_fd);
        self.adopt();
        self.answered();
        let ends = std::mem::take(&mut *self.shared.ends.lock().unwrap());
        for id in ends {
            self.close(id, "closed by the proxy".into());
        }
    }

    fn queue_full(&self) -> bool {
        let (items, bytes) = self.shared.queue_max;
        self.shared.queued_items.load(Ordering::Relaxed) >= items || self.shared.queued_bytes.load(Ordering::Relaxed) >= bytes
    }

    /// The queue is full (Python has not drained it: its loop is stalled): no socket is read
    /// until it drains, so that the queue, and what the pairs hold, stay bounded (back-pressure
    /// to every client and broker, as a stalled event loop gives on its own road). Python's asks
    /// are still served; the relay waits on `wake_fd`, which `drain` writes.
    fn wait_for_drain(&mut self) {
        self.shared.queue_full.fetch_add(1, Ordering::Relaxed);
        self.shared.paused.store(true, Ordering::Relaxed);
        bump(self.shared.notify_fd);
        while self.queue_full() && !self.shared.stop.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd { fd: self.shared.wake_fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one pollfd that lives for the call
            let n = unsafe { libc::poll(&mut pfd, 1, PAUSE_POLL_MS) };
            if n > 0 {
                self.woken();
            }
        }
        self.shared.paused.store(false, Ordering::Relaxed);
    }

    fn run(&mut self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        let mut failed = None;
        while !self.shared.stop.load(Ordering::Relaxed) {
            if self.queue_full() {
                self.wait_for_drain();
                continue;
            }
            // SAFETY: events has MAX_EVENTS entries for the kernel to fill
            let n = unsafe { libc::epoll_wait(self.ep, events.as_mut_ptr(), MAX_EVENTS as libc::c_int, self.wait_ms()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                failed = Some(format!("the relay stopped: epoll_wait failed: {e}"));
                break;
            }
            for ev in events.iter().take(n as usize) {
                let (token, flags) = (ev.u64, ev.events);
                if token == WAKE {
                    self.woken();
                    continue;
                }
                let (id, side) = (token >> 1, token & 1);
                if flags & libc::EPOLLOUT as u32 != 0 {
                    self.writable(id, side);
                }
                if flags & libc::EPOLLIN as u32 != 0 {
                    self.readable(id, side);
                } else if flags & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                    // reported even while this side is not read (back-pressure): the peer is gone
                    let err = flags & libc::EPOLLERR as u32 != 0;
                    if side == BROKER {
                        let eof = self.pairs.get(&id).is_some_and(|p| p.client_eof);
                        let reason = match (err, eof) {
                            (true, _) => "broker connection failed",
                            (false, true) => "broker closed the connection after the client's end of stream",
                            (false, false) => "broker closed the connection",
                        };
                        self.broker_hung_up(id, reason.into());
                    } else {
                        let what = if err { "connection failed" } else { "closed the connection" };
                        self.close(id, format!("client {what}"));
                    }
                }
            }
            self.notify_due();
        }
        // pairs handed over and not adopted yet are adopted to be closed; none is taken from here
        let late = self.shared.added.lock().unwrap().take().unwrap_or_default();
        self.adopt_pairs(late);
        let ids: Vec<u64> = self.pairs.keys().copied().collect();
        let reason = failed.unwrap_or_else(|| "the relay stopped".into());
        for id in ids {
            self.close(id, reason.clone());
        }
        bump(self.shared.notify_fd);
    }
}

/// The Python face: `Relay(max_frame_bytes, flexible, observed)`, the `Wire`'s tables.
#[pyclass(name = "Relay", module = "fetchlat.native._core")]
pub struct PyRelay {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    next_id: u64,
    ep: RawFd,
}

fn eventfd() -> PyResult<RawFd> {
    // SAFETY: no pointers
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 { Err(PyOSError::new_err(std::io::Error::last_os_error().to_string())) } else { Ok(fd) }
}

#[pymethods]
impl PyRelay {
    /// `whole`: `(api_key, lo, hi)` of the requests whose answers are held whole for Python to
    /// answer (a rewriter's); routed too. `ask_at_answer`: an exchange the core settles alone is
    /// one record, its answer's (`Wire::ask_at_answer`; a request unanswered at the end is
    /// recorded then).
    #[new]
    /// `queue_max`: `(items, bytes)`, the queue's bound (`QUEUE_MAX_*` when None; the tests ask less).
    #[pyo3(signature = (max_frame_bytes, flexible, observed, whole=Vec::new(), ask_at_answer=false, queue_max=None))]
    fn new(max_frame_bytes: i64, flexible: Vec<(i16, i16, i16)>, observed: Vec<(i16, i16, i16)>,
           whole: Vec<(i16, i16, i16)>, ask_at_answer: bool, queue_max: Option<(usize, usize)>) -> PyResult<Self> {
        // SAFETY: no pointers
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(PyOSError::new_err(std::io::Error::last_os_error().to_string()));
        }
        let shared = Arc::new(Shared { queue: Mutex::new(Vec::new()), queue_spare: Mutex::new(Vec::new()),
                                       spare: Mutex::new(Spare::default()), added: Mutex::new(Some(Vec::new())),
                                       answers: Mutex::new(Vec::new()), ends: Mutex::new(Vec::new()),
                                       stats: Mutex::new(HashMap::new()), kernel_reads: AtomicU64::new(0),
                                       clock_reads: AtomicU64::new(0), memo_rewrites: Mutex::new(HashMap::new()),
                                       stop: AtomicBool::new(false), notify_at: AtomicI64::new(0),
                                       queued_bytes: AtomicUsize::new(0), queued_items: AtomicUsize::new(0),
                                       queue_full: AtomicU64::new(0), paused: AtomicBool::new(false),
                                       queue_max: queue_max.unwrap_or((QUEUE_MAX_ITEMS, QUEUE_MAX_BYTES)),
                                       wake_fd: eventfd()?, notify_fd: eventfd()?, urgent_fd: eventfd()? });
        epoll_set(ep, libc::EPOLL_CTL_ADD, shared.wake_fd, libc::EPOLLIN as u32, WAKE)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        let mut looper = Looper { shared: shared.clone(), ep, pairs: HashMap::new(), buf: vec![0; READ_BYTES],
                                  max_frame: max_frame_bytes, flexible: Ranges::new(&flexible),
                                  observed: Ranges::new(&observed), whole, memo: Memo { entries: VecDeque::new() },
                                  stock: Stock::default(), ask_at_answer };
        let thread = std::thread::Builder::new().name("fetchlat-relay".into()).spawn(move || looper.run())
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(PyRelay { shared, thread: Some(thread), next_id: 1, ep })
    }

    /// Hands a connected pair over (the relay owns and closes both fds from here): its id.
    ///
    /// Refused (`RuntimeError`, the fds left the caller's) once the relay is closed or its
    /// thread has ended: nothing would own them.
    fn add(&mut self, client_fd: RawFd, broker_fd: RawFd) -> PyResult<u64> {
        let mut added = self.shared.added.lock().unwrap();
        let Some(queue) = added.as_mut().filter(|_| !self.shared.stop.load(Ordering::Relaxed)) else {
            return Err(PyRuntimeError::new_err("the relay is closed: it takes no connection"));
        };
        let id = self.next_id;
        self.next_id += 1;
        queue.push((id, client_fd, broker_fd));
        drop(added);
        bump(self.shared.wake_fd);
        Ok(id)
    }

    /// The queue to Python now and its bounds: `(items, bytes, max items, max bytes, times full)`:
    /// `times full`, how often it reached a bound and the relay stopped reading until a drain.
    fn queue_depth(&self) -> (usize, usize, usize, usize, u64) {
        (self.shared.queued_items.load(Ordering::Relaxed), self.shared.queued_bytes.load(Ordering::Relaxed),
         self.shared.queue_max.0, self.shared.queue_max.1, self.shared.queue_full.load(Ordering::Relaxed))
    }

    /// Ends pair `conn` (its fds closed, a CLOSED item queued, "closed by the proxy"); nothing
    /// for a pair already gone.
    fn end(&self, conn: u64) {
        self.shared.ends.lock().unwrap().push(conn);
        bump(self.shared.wake_fd);
    }

    /// Every pair's `(conn, from_client, from_broker, client_read_ns, partial_since_ns,
    /// stalled_since_ns, rtt_ns)`: the bytes read from the client and those of the broker's
    /// handed to the client (an answer held whole: its answer) so far, the last read of the
    /// client's, since when a request has been arriving (0: none is), since when bytes have
    /// waited for the client's socket (0: none wait), and the client connection's RTT (0: not
    /// read yet). Each figure is read apart (one pair's may be a read apart from each other).
    #[allow(clippy::type_complexity)]
    fn timers(&self) -> Vec<(u64, u64, u64, i64, i64, i64, i64)> {
        let stats = self.shared.stats.lock().unwrap();
        stats.iter().map(|(&id, s)| {
            let (c, b) = s.counts();
            (id, c, b, s.client_read_ns.load(Ordering::Relaxed), s.partial_since_ns.load(Ordering::Relaxed),
             s.stalled_since_ns.load(Ordering::Relaxed), s.rtt_ns.load(Ordering::Relaxed))
        }).collect()
    }

    /// The answers held whole that the core answered itself from Python's earlier answer to the
    /// same, where that answer was a rewrite: `{api_key: count}` so far.
    fn memo_rewrites(&self) -> HashMap<i16, u64> {
        self.shared.memo_rewrites.lock().unwrap().clone()
    }

    /// The buffers handed back from drains and not yet taken by the relay's thread:
    /// `(how many, their capacity in bytes)`, at most `SPARE_HELD_BYTES` (`Spare`).
    fn spare_held(&self) -> (usize, usize) {
        let s = self.shared.spare.lock().unwrap();
        (s.bytes.len() + s.words.len() + s.ids.len(), s.held)
    }

    /// The reads of broker sockets so far: `(stamped by the kernel, stamped by the clock)`.
    fn stamps(&self) -> (u64, u64) {
        (self.shared.kernel_reads.load(Ordering::Relaxed), self.shared.clock_reads.load(Ordering::Relaxed))
    }

    /// The eventfd written when the queue goes from empty to not (read it to clear it).
    #[getter]
    fn notify_fd(&self) -> RawFd {
        self.shared.notify_fd
    }

    /// The eventfd written when a `REWRITE` is queued: a client waits for its answer.
    #[getter]
    fn urgent_fd(&self) -> RawFd {
        self.shared.urgent_fd
    }

    /// The frame (size prefix included) to write in place of the oldest answer held whole of
    /// pair `conn` that Python was given (a `REWRITE`): its rewrite, or the very frame.
    fn answer(&self, conn: u64, frame: Vec<u8>) {
        self.shared.answers.lock().unwrap().push((conn, frame));
        bump(self.shared.wake_fd);
    }

    /// What was queued since the last drain, in order, flat: `(heads, parts)`. `heads` holds an
    /// item's fixed fields, `ITEM_WIDTH` native-endian i64s each (the records' width, so Python
    /// reads both the same way): `conn, kind, t_ns, t_written_ns, client bytes, broker bytes, api,
    /// present, ids, 0`; `parts`, each item's variable parts after the last's, those its
    /// `present` bits name, in this order: the bytes the Python road parses (`HAS_DATA`), the
    /// records of the exchanges the core settled alone (`HAS_RECORDS`: `Wire`'s layout) and then
    /// the `ids` client ids (str) they index, the earlier reads' `(read, written)` stamps
    /// (`HAS_HANDED`: for an item that gathers an answer's body over several reads, `Gather`;
    /// native-endian i64 pairs), the digest's head, skeleton and figures (`HAS_DIGEST`: the Fetch
    /// answer under way, head b"", or the Produce request, its size prefix and first bytes, that
    /// ended in this read, which Python takes before the item's bytes; `digest.rs`,
    /// `protocol/digested.py`), the reason (`HAS_REASON`, str).
    ///
    /// `kind` FROM_CLIENT or FROM_BROKER: read at `t_ns` and written on at `t_written_ns`;
    /// REWRITE: an answer held whole (size prefix included, as its data) and `api`, its request's
    /// `key << 16 | version` (-1 for none), for `answer`; CLOSED with the reason. The two byte
    /// counts: read from the client and from the broker so far (a REWRITE's: 0, 0). One list and
    /// one bytes a drain, where an item was a tuple of twelve.
    fn drain<'py>(&self, py: Python<'py>) -> (Bound<'py, PyBytes>, Bound<'py, PyList>) {
        let mut items = std::mem::take(&mut *self.shared.queue_spare.lock().unwrap());
        // the batch's wake is off before its items are taken: an item queued in between sets it
        // again (at worst a wake that finds the queue empty), never an item left with none
        self.shared.notify_at.store(0, Ordering::Relaxed);
        self.shared.queued_bytes.store(0, Ordering::Relaxed);
        std::mem::swap(&mut items, &mut *self.shared.queue.lock().unwrap());
        self.shared.queued_items.store(0, Ordering::Relaxed);
        if self.shared.paused.load(Ordering::Relaxed) {
            bump(self.shared.wake_fd); // the relay waits for this drain to read again
        }
        let (mut bytes, mut words, mut idss) = (Vec::new(), Vec::new(), Vec::new());
        let mut heads: Vec<i64> = Vec::with_capacity(items.len() * ITEM_WIDTH);
        let parts = PyList::empty(py);
        for it in items.drain(..) {
            let mut present = 0;
            let mut n_ids = 0;
            if !it.python.is_empty() {
                present |= HAS_DATA;
                let _ = parts.append(PyBytes::new(py, &it.python));
            }
            bytes.push(it.python);
            if let Some((r, ids)) = it.records {
                present |= HAS_RECORDS;
                n_ids = ids.len() as i64;
                let _ = parts.append(i64_bytes(py, &r));
                for i in &ids {
                    let _ = parts.append(client_id(py, i));
                }
                words.push(r);
                idss.push(ids);
            }
            if !it.handed.is_empty() {
                present |= HAS_HANDED;
                let _ = parts.append(i64_bytes(py, &it.handed));
            }
            if let Some(d) = it.digest {
                present |= HAS_DIGEST;
                let _ = parts.append(PyBytes::new(py, &d.head));
                let _ = parts.append(PyBytes::new(py, &d.skeleton));
                let _ = parts.append(i64_bytes(py, &d.stats));
            }
            if !it.reason.is_empty() {
                present |= HAS_REASON;
                let _ = parts.append(PyString::new(py, &it.reason));
            }
            let api = it.api.map_or(-1, |(k, v)| (i64::from(k) << 16) | i64::from(v as u16));
            heads.extend_from_slice(&[it.conn as i64, it.kind, it.t_ns, it.t_written_ns, it.counts.0 as i64,
                                      it.counts.1 as i64, api, present, n_ids, 0]);
        }
        *self.shared.queue_spare.lock().unwrap() = items;
        self.shared.spare.lock().unwrap().keep(bytes, words, idss);
        (i64_bytes(py, &heads), parts)
    }

    /// Stops the thread and closes every pair (idempotent).
    fn close(&mut self, py: Python<'_>) {
        self.shared.stop.store(true, Ordering::Relaxed);
        bump(self.shared.wake_fd);
        if let Some(t) = self.thread.take() {
            py.allow_threads(|| { let _ = t.join(); });
        }
    }
}

impl Drop for PyRelay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        bump(self.shared.wake_fd);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // SAFETY: these fds are this relay's alone, closed once
        unsafe {
            libc::close(self.ep);
            libc::close(self.shared.wake_fd);
            libc::close(self.shared.notify_fd);
            libc::close(self.shared.urgent_fd);
        }
    }
}

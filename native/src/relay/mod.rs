//! A connection pair's reads and writes owned by the core: the step of the native road past
//! `Wire` (`docs/architecture.md`, "The native core"), the road that carries a sidecar's
//! client connections after their first answer (`relay: auto`, the default; `proxy/relayed.py`;
//! a TLS client's session is the core's from its first byte: `front.rs`). This file is its
//! Python face (`PyRelay`); the thread is `looper.rs`.
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
//! What it does not do (the Python road's, where the proxy is): SASL's raw tokens (after a
//! SaslHandshake v0 the Python road is fed every byte, and only observes), hold a request while
//! the broker connection is not up. A side that errs or sends a frame the `Wire` refuses, or a
//! broker that closes, ends the pair; the queue says why. A client's end of stream is a
//! half-close, passed on: the broker's write side is shut once what waits for it is written, and
//! its answers still go back until it closes too.
//!
//! Back-pressure: bytes a side's socket does not take at once wait in its own queue, and the
//! other side is not read until they are written; at a full queue to Python no socket is read
//! until Python drains it (`QUEUE_MAX_*`). Every length the kernel returns is checked against
//! the buffer it was given, and every system call's result is checked (`sys.rs`). The bounds
//! and timeouts, and what happens at each: `docs/proxy.md`.

mod front;
mod gather;
mod held;
mod looper;
mod memo;
mod pair;
mod queue;
mod route;
mod shared;
mod spare;
mod sys;

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::tls::TlsSession;
use crate::wire::{client_id, Ranges};
use crate::stamps::READ_BYTES;
use crate::values::i64_bytes;
use looper::WAKE;
use shared::Shared;
use spare::{Spare, Stock, Wholes};
use sys::{bump, epoll_set};
use looper::Looper;
use memo::Memo;
use queue::Item;
use pair::{BROKER, CLIENT};

pub use gather::GATHER_BYTES;
pub use queue::*;
pub use spare::SPARE_HELD_BYTES;

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

impl PyRelay {
    /// `add`'s work, with the client's TLS session where the core carries its TLS.
    fn hand(&mut self, client_fd: RawFd, broker_fd: RawFd, tls: Option<Box<TlsSession>>) -> PyResult<u64> {
        let mut added = self.shared.added.lock().unwrap();
        let Some(queue) = added.as_mut().filter(|_| !self.shared.stop.load(Ordering::Relaxed)) else {
            return Err(PyRuntimeError::new_err("the relay is closed: it takes no connection"));
        };
        let id = self.next_id;
        self.next_id += 1;
        queue.push((id, client_fd, broker_fd, tls));
        drop(added);
        bump(self.shared.wake_fd);
        Ok(id)
    }

    /// A pair whose client speaks TLS to the core (`tls.rs`), from its handshake on: the
    /// relay's road for TLS clients, which the proxy does not take yet (its tests do).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn add_tls(&mut self, client_fd: RawFd, broker_fd: RawFd, tls: TlsSession) -> PyResult<u64> {
        self.hand(client_fd, broker_fd, Some(Box::new(tls)))
    }

    /// A front (`side` `CLIENT`) or a back (`BROKER`): the TLS socket `fd` and its session, the
    /// core's from here, bridged to Python over a socketpair: its id and Python's end.
    fn bridged(&mut self, side: u64, fd: RawFd, tls: TlsSession) -> PyResult<(u64, RawFd)> {
        if self.shared.stop.load(Ordering::Relaxed) {
            return Err(PyRuntimeError::new_err("the relay is closed: it takes no connection"));
        }
        let mut fds: [libc::c_int; 2] = [-1; 2];
        // SAFETY: the kernel writes two fds into `fds`
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } < 0 {
            return Err(PyOSError::new_err(std::io::Error::last_os_error().to_string()));
        }
        let Some(python_end) = front::inode(fds[1]) else {
            // SAFETY: the fds just made, ours alone
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            return Err(PyOSError::new_err(std::io::Error::last_os_error().to_string()));
        };
        let id = self.next_id;
        self.next_id += 1;
        self.shared.fronts.lock().unwrap().push((id, side, fd, Box::new(tls), fds[0], python_end));
        bump(self.shared.wake_fd);
        Ok((id, fds[1]))
    }
}

#[pymethods]
impl PyRelay {
    /// `whole`: `(api_key, lo, hi)` of the requests whose answers are held whole for Python to
    /// answer (a rewriter's); routed too. `ask_at_answer`: an exchange the core settles alone is
    /// one record, its answer's (`Wire::ask_at_answer`; a request unanswered at the end is
    /// recorded then).
    #[new]
    /// `queue_max`: `(items, bytes)`, the queue's bound (`QUEUE_MAX_*` when None); `held_max`:
    /// `(one pair, all pairs)`, the bytes they may hold (`HELD_MAX_*` when None). The tests ask less.
    #[pyo3(signature = (max_frame_bytes, flexible, observed, whole=Vec::new(), ask_at_answer=false, queue_max=None,
                        held_max=None))]
    fn new(max_frame_bytes: i64, flexible: Vec<(i16, i16, i16)>, observed: Vec<(i16, i16, i16)>,
           whole: Vec<(i16, i16, i16)>, ask_at_answer: bool, queue_max: Option<(usize, usize)>,
           held_max: Option<(usize, usize)>) -> PyResult<Self> {
        // SAFETY: no pointers
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(PyOSError::new_err(std::io::Error::last_os_error().to_string()));
        }
        let shared = Arc::new(Shared { queue: Mutex::new(Vec::new()), queue_spare: Mutex::new(Vec::new()),
                                       spare: Mutex::new(Spare::default()), added: Mutex::new(Some(Vec::new())),
                                       fronts: Mutex::new(Vec::new()), tls_config: Mutex::new(None),
                                       upstream_tls_config: Mutex::new(None),
                                       answers: Mutex::new(Vec::new()), ends: Mutex::new(Vec::new()),
                                       stats: Mutex::new(HashMap::new()), kernel_reads: AtomicU64::new(0),
                                       clock_reads: AtomicU64::new(0), memo_rewrites: Mutex::new(HashMap::new()),
                                       generation: AtomicU64::new(0),
                                       stop: AtomicBool::new(false), notify_at: AtomicI64::new(0),
                                       queued_bytes: AtomicUsize::new(0), queued_items: AtomicUsize::new(0),
                                       queue_full: AtomicU64::new(0), paused: AtomicBool::new(false),
                                       queue_max: queue_max.unwrap_or((QUEUE_MAX_ITEMS, QUEUE_MAX_BYTES)),
                                       held_max: held_max.unwrap_or((HELD_MAX_PAIR, HELD_MAX_TOTAL)),
                                       held_now: AtomicUsize::new(0),
                                       wake_fd: eventfd()?, notify_fd: eventfd()?, urgent_fd: eventfd()? });
        epoll_set(ep, libc::EPOLL_CTL_ADD, shared.wake_fd, libc::EPOLLIN as u32, WAKE)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        let mut looper = Looper { shared: shared.clone(), ep, pairs: HashMap::new(), buf: vec![0; READ_BYTES], plain: Vec::new(),
                                  fronts: Default::default(),
                                  max_frame: max_frame_bytes, flexible: Ranges::new(&flexible),
                                  observed: Ranges::new(&observed), whole, memo: Memo { entries: VecDeque::new() },
                                  stock: Stock::default(), offset: Default::default(), ask_at_answer,
                                  held_total: 0, wholes: Wholes::default() };
        let thread = std::thread::Builder::new().name("fetchlat-relay".into()).spawn(move || looper.run())
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(PyRelay { shared, thread: Some(thread), next_id: 1, ep })
    }

    /// Hands a connected pair over (the relay owns and closes both fds from here): its id.
    ///
    /// Refused (`RuntimeError`, the fds left the caller's) once the relay is closed or its
    /// thread has ended: nothing would own them.
    fn add(&mut self, client_fd: RawFd, broker_fd: RawFd) -> PyResult<u64> {
        self.hand(client_fd, broker_fd, None)
    }

    /// The listener's TLS settings (PEM files: the certificate chain, its key, and the client
    /// authority that makes a client certificate required) for the connections `front` takes
    /// from here; a reload calls it again. `ValueError` says which file and why.
    #[pyo3(signature = (cert, key, client_ca=None))]
    fn tls_config(&self, cert: &str, key: &str, client_ca: Option<&str>) -> PyResult<()> {
        let config = crate::tls::server_config(cert, key, client_ca).map_err(PyValueError::new_err)?;
        *self.shared.tls_config.lock().unwrap() = Some(config);
        Ok(())
    }

    /// Takes a TLS client's connection from its first byte (`client_fd`, the core's from here;
    /// `relay/front.rs`): its id (a failure comes back as a `CLOSED` item under it) and the
    /// plaintext end for Python, a connected Unix socket that is Python's to read, write and
    /// close. Its hand-over is `add` of that end (a duplicate of it): the pair is the TLS socket.
    fn front(&mut self, client_fd: RawFd) -> PyResult<(u64, RawFd)> {
        let config = self.shared.tls_config.lock().unwrap().clone()
            .ok_or_else(|| PyRuntimeError::new_err("the relay has no TLS settings (tls_config)"))?;
        let tls = TlsSession::server(&config).map_err(PyRuntimeError::new_err)?;
        self.bridged(CLIENT, client_fd, tls)
    }

    /// The brokers' TLS settings (PEM files: the authorities a broker's certificate must chain
    /// to, the proxy's own certificate and key for mTLS) for the connections `back` takes from
    /// here; a reload calls it again. `ValueError` says which file and why.
    #[pyo3(signature = (ca, cert=None, key=None))]
    fn upstream_tls_config(&self, ca: &str, cert: Option<&str>, key: Option<&str>) -> PyResult<()> {
        let config = crate::tls::client_config(ca, cert, key).map_err(PyValueError::new_err)?;
        *self.shared.upstream_tls_config.lock().unwrap() = Some(config);
        Ok(())
    }

    /// Takes a connection to a broker (`broker_fd`, connected, the core's from here), whose
    /// certificate must name `server_name`, and speaks TLS with it from its first byte
    /// (`relay/front.rs`, a back): its id (a `READY` item once the handshake completed, or a
    /// `CLOSED` item with why not) and the plaintext end for Python. Its hand-over is `add` of
    /// that end (a duplicate of it) as the broker's: the pair's broker side is the TLS socket.
    fn back(&mut self, broker_fd: RawFd, server_name: &str) -> PyResult<(u64, RawFd)> {
        let config = self.shared.upstream_tls_config.lock().unwrap().clone()
            .ok_or_else(|| PyRuntimeError::new_err("the relay has no TLS settings for brokers (upstream_tls_config)"))?;
        let tls = TlsSession::client(&config, server_name).map_err(PyValueError::new_err)?;
        self.bridged(BROKER, broker_fd, tls)
    }

    /// The bytes all pairs hold now and the bounds: `(held, one pair's bound, all pairs' bound)`.
    fn held(&self) -> (usize, usize, usize) {
        let (pair, total) = self.shared.held_max;
        (self.shared.held_now.load(Ordering::Relaxed), pair, total)
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
    /// `generation`: Python's generation of the brokers it knows after it, at which the core may
    /// repeat the same answer itself (`memo.rs`); None: never (an ApiVersions answer, which
    /// teaches nothing, is repeated at any).
    #[pyo3(signature = (conn, frame, generation=None))]
    fn answer(&self, conn: u64, frame: Vec<u8>, generation: Option<u64>) {
        self.shared.answers.lock().unwrap().push((conn, frame, generation));
        bump(self.shared.wake_fd);
    }

    /// Python's generation of the brokers it knows changed (a broker learned or moved): the
    /// answers remembered at another no longer repeat.
    fn set_generation(&self, generation: u64) {
        self.shared.generation.store(generation, Ordering::Relaxed);
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
        let mut items = self.taken();
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

impl PyRelay {
    /// The items queued since the last drain, taken (the queue's buffer from the drain before
    /// swapped in): the first half of `drain`, which lays them out for Python.
    fn taken(&self) -> Vec<Item> {
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
        items
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

#[cfg(test)]
#[path = "../tests/relay.rs"]
mod tests;

//! One connection pair's state: each side's socket and what waits for it (`Side`, `Seg`), the
//! pair's framing, gathers and half-close, its counters for Python (`Stats`), and its epoll
//! interest (`rearm`: back-pressure).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::tls::TlsSession;
use crate::wire::Wire;
use super::gather::Gather;
use super::spare::Wholes;
use super::sys::{epoll_set, mono_ns, write_some};

/// An epoll token's low bit: the side of the pair it names (`id << 1 | side`).
pub(super) const CLIENT: u64 = 0;
pub(super) const BROKER: u64 = 1;


/// What Python's timers and counters read of a pair, written by the relay's thread alone.
#[derive(Default)]
pub(super) struct Stats {
    pub(super) from_client: AtomicU64,
    pub(super) from_broker: AtomicU64,
    /// the last read of the client's bytes
    pub(super) client_read_ns: AtomicI64,
    /// a request begun and not finished since then (0: none)
    pub(super) partial_since_ns: AtomicI64,
    /// bytes have waited for the client's socket since then (0: none wait)
    pub(super) stalled_since_ns: AtomicI64,
    /// the kernel's smoothed RTT of the client connection (0: not read yet)
    pub(super) rtt_ns: AtomicI64,
    pub(super) rtt_at_ns: AtomicI64,
}

impl Stats {
    pub(super) fn counts(&self) -> (u64, u64) {
        (self.from_client.load(Ordering::Relaxed), self.from_broker.load(Ordering::Relaxed))
    }
}

/// What waits for a side's socket, in order.
pub(super) enum Seg {
    Bytes(Vec<u8>),
    /// an answer held whole: `asked` once it is whole and Python has it (`answer` replaces it);
    /// `key` what the memo would know it by (its request's key and version, its bytes past the
    /// correlation id)
    Answer { asked: bool, key: Option<(i16, i16, Vec<u8>)> },
}

pub(super) struct Side {
    pub(super) fd: RawFd,
    pub(super) queue: VecDeque<Seg>,
    /// this side's TLS session where the core carries its TLS (`tls.rs`: the client's, or the
    /// broker's): what this side is written is encrypted by it (the queue holds plaintext), what
    /// is read of it decrypted
    pub(super) tls: Option<Box<TlsSession>>,
    /// the bytes of the queue's first segment already written: a big segment (an answer held
    /// whole) written in many pieces is never moved down
    pub(super) sent: usize,
}

impl Side {
    pub(super) fn new(fd: RawFd, tls: Option<Box<TlsSession>>) -> Self {
        Self { fd, queue: VecDeque::new(), tls, sent: 0 }
    }

    /// This side's queue lets the other side be read: nothing waits, or only an answer held
    /// whole that is still arriving (its rest must be read). (TLS bytes in the session do not
    /// stop it: the session takes at most `tls::OUT_LIMIT`, the rest waits in the queue.)
    pub(super) fn lets_other_read(&self) -> bool {
        matches!((self.queue.len(), self.queue.front()), (0, _) | (1, Some(Seg::Answer { asked: false, .. })))
    }

    /// Bytes wait for this side's socket: in its queue, or encrypted in its TLS session.
    pub(super) fn waiting(&self) -> bool {
        matches!(self.queue.front(), Some(Seg::Bytes(_))) || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Writes `data`, nothing waiting before it in the queue: what the socket (or the TLS
    /// session) does not take now waits in the queue.
    pub(super) fn write_now(&mut self, data: &[u8]) -> std::io::Result<()> {
        let k = match self.tls.as_mut() {
            None => write_some(self.fd, data)?,
            Some(t) => {
                let k = t.take(data);
                t.flush(self.fd)?;
                k
            }
        };
        if k < data.len() {
            self.queue.push_back(Seg::Bytes(data[k..].to_vec()));
        }
        Ok(())
    }

    /// Writes what it can of the queue, up to an answer not given yet (through the TLS session,
    /// which is flushed first and last, where there is one); the big buffers written out go to
    /// `wholes`.
    pub(super) fn flush(&mut self, wholes: &mut Wholes) -> std::io::Result<()> {
        if let Some(t) = self.tls.as_mut() {
            t.flush(self.fd)?;
        }
        while let Some(Seg::Bytes(v)) = self.queue.front() {
            let rest = &v[self.sent..];
            let k = match self.tls.as_mut() {
                None => write_some(self.fd, rest)?,
                Some(t) => t.take(rest),
            };
            if k < rest.len() {
                self.sent += k;
                break;
            }
            self.sent = 0;
            if let Some(Seg::Bytes(v)) = self.queue.pop_front() {
                wholes.keep(v); // for the next answer held whole
            }
        }
        if let Some(t) = self.tls.as_mut() {
            t.flush(self.fd)?;
        }
        Ok(())
    }
}

pub(super) struct Pair {
    pub(super) client: Side,
    pub(super) broker: Side,
    /// the answer held whole so far
    pub(super) whole: Vec<u8>,
    /// the epoll interest set for the client's and the broker's socket
    pub(super) armed: [u32; 2],
    pub(super) wire: Wire,
    pub(super) stats: Arc<Stats>,
    /// the client ended its stream (a half-close): it is not read again, and the broker's write
    /// side is shut once what waits for it is written (`shut`), as the event loop passes it on
    pub(super) client_eof: bool,
    pub(super) shut: bool,
    /// the body so far of the broker's answer under way that the Python road parses
    pub(super) gather: Option<Gather>,
    /// the bytes so far of the client's request under way that the Python road parses
    pub(super) gather_rq: Option<Gather>,
    /// the broker is gone (why) while bytes were still owed to the client: its socket is out of
    /// the epoll set, and the pair ends once the client has them all
    pub(super) broker_gone: Option<String>,
    /// the bytes it held after its last read (`held`), as counted in the relay's total
    pub(super) held: usize,
}

impl Pair {
    /// The bytes the pair holds now: waiting for either socket, the answer held whole so far,
    /// what is gathered or digested of a message either way.
    pub(super) fn held(&self) -> usize {
        let queued = |s: &Side| s.queue.iter().map(|seg| if let Seg::Bytes(b) = seg { b.len() } else { 0 }).sum::<usize>();
        queued(&self.client) + queued(&self.broker) + self.whole.len()
            + self.gather.as_ref().map_or(0, Gather::held) + self.gather_rq.as_ref().map_or(0, Gather::held)
    }
}

/// Each side's epoll interest: read it while the other side has nothing waiting for its socket
/// (back-pressure), and wait to write to it while it has.
/// (Only what changed since the last call: the common read changes nothing, and costs no call.)
pub(super) fn rearm(ep: RawFd, id: u64, p: &mut Pair) -> Result<(), String> {
    let sides = [(CLIENT, &p.client, &p.broker), (BROKER, &p.broker, &p.client)];
    for (i, (side, me, other)) in sides.into_iter().enumerate() {
        if side == BROKER && p.broker_gone.is_some() {
            continue; // out of the epoll set
        }
        let mut ev = 0u32;
        if other.lets_other_read() && !(side == CLIENT && p.client_eof) {
            ev |= libc::EPOLLIN as u32;
        }
        if me.waiting() {
            ev |= libc::EPOLLOUT as u32;
        }
        if p.armed[i] != ev {
            p.armed[i] = ev;
            epoll_set(ep, libc::EPOLL_CTL_MOD, me.fd, ev, id << 1 | side).map_err(|e| format!("relay epoll: {e}"))?;
        }
    }
    if p.client_eof && !p.shut && !p.broker.waiting() && p.broker_gone.is_none() {
        if let Some(t) = p.broker.tls.as_mut() {
            t.end(p.broker.fd); // a TLS broker is told first: its close_notify before the end of stream
        }
        p.shut = true;
        // SAFETY: the pair's own fd
        if unsafe { libc::shutdown(p.broker.fd, libc::SHUT_WR) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTCONN) {
                return Err(format!("passing the client's end of stream to the broker: {e}"));
            }
        }
    }
    let waits = p.client.waiting();
    let since = &p.stats.stalled_since_ns;
    if waits != (since.load(Ordering::Relaxed) != 0) {
        since.store(if waits { mono_ns() } else { 0 }, Ordering::Relaxed);
    }
    Ok(())
}

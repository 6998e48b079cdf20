//! The relay's thread: one epoll loop over its pairs (`Looper::run`): reads, frames, writes
//! on (`held.rs`: the answers held whole), queues for Python (`route.rs`: what Python must see
//! of a read); adopts, answers and ends what Python asks; stops at a full queue.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::stamps::{recv_stamped, Read, WallOffset};
use crate::tls::Read1;
use crate::wire::{Framing, Ranges, Routed, Wire};
use super::front::{Fronts, Fused};
use super::gather::gathered;
use super::held::{pass_on, put_answer};
use super::route::{answer_items, request_items};
use super::memo::Memo;
use super::pair::{rearm, Pair, Side, Stats, BROKER, CLIENT};
use super::queue::{BATCH_NS, CLOSED, FROM_CLIENT, Item, NOTIFY_BYTES, NOTIFY_ITEMS, READY, REWRITE};
use super::shared::{Added, Shared};
use super::spare::{Stock, Wholes};
use super::sys::{bump, clear, epoll_set, mono_ns, nonblocking, sockopt_on, tcp_rtt_ns};




/// The epoll token of the wake-up eventfd (no connection has it: ids start at 1).
pub(super) const WAKE: u64 = u64::MAX;

pub(super) const MAX_EVENTS: usize = 64;

/// How often a relay stopped on a full queue looks again without being woken (ms).
pub(super) const PAUSE_POLL_MS: libc::c_int = 100;

/// How long the relay's thread sleeps with nothing due. It is woken for anything Python asks
/// (a pair to adopt, an answer, an end, the stop: `wake_fd`) and by its sockets, and nothing of
/// its own falls due while no batch is under way (the connections' timers are Python's, read at
/// the tick): this bound is only a backstop. At 200 ms (before 2026-12-03) an idle sidecar's
/// relay thread woke five times a second for nothing.
pub(super) const IDLE_WAIT_MS: libc::c_int = 5_000;

/// how often the client connection's RTT is read (as the asyncio road: once a second at most)
pub(super) const RTT_EVERY_NS: i64 = 1_000_000_000;

pub(super) struct Looper {
    pub(super) shared: Arc<Shared>,
    pub(super) ep: RawFd,
    pub(super) pairs: HashMap<u64, Pair>,
    /// TLS clients' connections before their hand-over (`front.rs`), by id
    pub(super) fronts: Fronts,
    pub(super) buf: Vec<u8>,
    /// the plaintext of a TLS client's read (`buf` is its TLS bytes' place in rustls' own buffer)
    pub(super) plain: Vec<u8>,
    pub(super) max_frame: i64,
    pub(super) flexible: Ranges,
    pub(super) observed: Ranges,
    pub(super) whole: Vec<(i16, i16, i16)>,
    pub(super) memo: Memo,
    pub(super) stock: Stock,
    /// wall - monotonic, for the kernel's stamps (`stamps.rs`: the rule of `proxy/clock.py`)
    pub(super) offset: WallOffset,
    /// each pair's `Wire::ask_at_answer`: an exchange the core settles alone queues one record
    pub(super) ask_at_answer: bool,
    /// the bytes all pairs held after their last reads (each pair's `held`)
    pub(super) held_total: usize,
    /// buffers written out, to hold the next answers whole in (`held.rs`)
    pub(super) wholes: Wholes,
}

impl Looper {
    pub(super) fn push(&self, item: Item) {
        let urgent = item.kind == REWRITE || item.kind == READY;
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
    pub(super) fn notify_due(&self) {
        let at = self.shared.notify_at.load(Ordering::Relaxed);
        if at != 0 && mono_ns() >= at
            && self.shared.notify_at.compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            bump(self.shared.notify_fd);
        }
    }

    /// How long `epoll_wait` may sleep (ms): until the batch under way is due, or `IDLE_WAIT_MS`.
    pub(super) fn wait_ms(&self) -> libc::c_int {
        match Some(self.shared.notify_at.load(Ordering::Relaxed)).filter(|&at| at != 0) {
            Some(at) => ((at - mono_ns()).max(0) as u64).div_ceil(1_000_000).min(IDLE_WAIT_MS as u64) as libc::c_int,
            None => IDLE_WAIT_MS,
        }
    }

    pub(super) fn close(&mut self, id: u64, reason: String) {
        if let Some(mut p) = self.pairs.remove(&id) {
            self.held_total -= p.held;
            self.shared.held_now.store(self.held_total, Ordering::Relaxed);
            self.shared.stats.lock().unwrap().remove(&id);
            for side in [&mut p.client, &mut p.broker] {
                if let Some(t) = side.tls.as_mut() {
                    t.end(side.fd); // its close_notify, as much as its socket takes now
                }
            }
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

    pub(super) fn adopt(&mut self) {
        let added = match self.shared.added.lock().unwrap().as_mut() {
            Some(v) => std::mem::take(v),
            None => Vec::new(),
        };
        self.adopt_pairs(added);
    }

    pub(super) fn adopt_pairs(&mut self, added: Vec<Added>) {
        'pairs: for (id, cfd, bfd, tls) in added {
            // a TLS client's connection the core fronted, a TLS broker connection it backed:
            // their hand-over is the fuse of the two
            let mut fds = [cfd, bfd];
            let mut sessions = [tls, None];
            let mut begins = [None, None];
            for side in [CLIENT, BROKER] {
                let i = side as usize;
                if sessions[i].is_some() {
                    continue;
                }
                let Some(fused) = self.fronts.fuse(self.ep, &mut self.buf, fds[i], side) else { continue };
                // SAFETY: Python's duplicate of its bridge end, handed to the relay to close
                unsafe { libc::close(fds[i]) };
                match fused {
                    Ok(Fused { peer, tls, owed, unread, peer_done }) => {
                        fds[i] = peer;
                        sessions[i] = Some(tls);
                        begins[i] = Some((owed, unread, peer_done));
                    }
                    Err(reason) => {
                        // SAFETY: the other side's fd, handed to the relay to own (a back's
                        // bridge end not fused yet: the back ends when Python's end closes)
                        unsafe { libc::close(fds[1 - i]) };
                        self.closed_item(id, reason);
                        continue 'pairs;
                    }
                }
            }
            let [cfd, bfd] = fds;
            let [tls, broker_tls] = sessions;
            // the kernel's stamps: without them the broker's reads are dated by the clock (and
            // counted so, `stamps`); without TCP_NODELAY small answers may wait for Nagle: neither
            // ends the pair. A socket that cannot be made non-blocking, or watched, is refused.
            let _stamped = sockopt_on(bfd, libc::SOL_SOCKET, crate::stamps::SO_TIMESTAMPNS);
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
                self.closed_item(id, format!("relay could not take the connection: {e}"));
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
            self.pairs.insert(id, Pair { client: Side::new(cfd, tls), broker: Side::new(bfd, broker_tls), whole: Vec::new(),
                                         armed: [libc::EPOLLIN as u32; 2], wire, stats, client_eof: false,
                                         shut: false, gather: None, gather_rq: None, broker_gone: None,
                                         held: 0 });
            let [client_begins, broker_begins] = begins;
            for (side, begun) in [(BROKER, broker_begins), (CLIENT, client_begins)] {
                if let Some((owed, unread, done)) = begun {
                    self.fused_begins(id, side, &owed, unread, done);
                }
            }
        }
    }

    /// A side is readable: one read, framed, written on, queued for Python.
    pub(super) fn readable(&mut self, id: u64, side: u64) {
        let mut items = Vec::new();
        match self.read_one(id, side, &mut items) {
            Ok(()) => {
                for item in items {
                    self.push(item);
                }
                if let Some(reason) = self.over_bounds(id) {
                    self.close(id, reason);
                }
            }
            Err(reason) => self.close(id, reason),
        }
    }

    /// What the pair holds after a read, counted in the total: past its bound or the relay's,
    /// why the pair ends (its reason begins `relay buffers`, counted so by the Python road).
    fn over_bounds(&mut self, id: u64) -> Option<String> {
        let (pair_max, total_max) = self.shared.held_max;
        let held = self.recount(id)?;
        if held > pair_max {
            return Some(format!("relay buffers: the connection holds {held} bytes, more than its bound of {pair_max}"));
        }
        if self.held_total > total_max {
            return Some(format!("relay buffers: the connections hold {} bytes, more than the relay's bound of {total_max}",
                                self.held_total));
        }
        None
    }

    /// What the pair holds now, counted in the relay's total (and its gauge); None for a pair gone.
    fn recount(&mut self, id: u64) -> Option<usize> {
        let p = self.pairs.get_mut(&id)?;
        let held = p.held();
        self.held_total = self.held_total + held - p.held;
        p.held = held;
        self.shared.held_now.store(self.held_total, Ordering::Relaxed);
        Some(held)
    }

    /// `readable`'s work: the items to queue, or why the pair ends.
    pub(super) fn read_one(&mut self, id: u64, side: u64, items: &mut Vec<Item>) -> Result<(), String> {
        let Some(p) = self.pairs.get_mut(&id) else { return Ok(()) };
        let mut tls_closed = false;
        let (n, t_ns) = if side == BROKER {
            let (n, t) = match recv_stamped(p.broker.fd, &mut self.buf) {
                Ok(Read::WouldBlock) => return Ok(()),
                Ok(Read::Data { n, wall_ns }) => {
                    let now = mono_ns();
                    let source = if wall_ns.is_some() { &self.shared.kernel_reads } else { &self.shared.clock_reads };
                    if n > 0 {
                        source.fetch_add(1, Ordering::Relaxed); // (an end of stream comes with no stamp)
                    }
                    // the kernel's wall stamp onto the monotonic clock, never after the read itself
                    let t = wall_ns.map_or(now, |w| self.offset.mono_of(w, now));
                    (n, t)
                }
                Err(e) => return Err(format!("broker read: {e}")),
            };
            let Some(tls) = p.broker.tls.as_mut() else { return self.forward_read(id, side, n, t, false, false, items) };
            // the broker's TLS bytes, read with their stamp, decrypted; what the session
            // answers (a key update, an alert) goes back at once
            self.plain.clear();
            let got = tls.feed(&self.buf[..n], &mut self.plain);
            let flushed = tls.flush(p.broker.fd);
            let closed = got.map_err(|failure| failure.reason(true))? == Read1::Closed;
            flushed.map_err(|e| format!("write to the broker: {e}"))?;
            let m = self.plain.len();
            if m > 0 {
                self.forward_read(id, side, m, t, true, false, items)?;
            }
            if closed {
                return self.forward_read(id, side, 0, t, true, false, items); // its end of stream
            }
            if m == 0 {
                return self.pairs.get_mut(&id).map_or(Ok(()), |p| rearm(self.ep, id, p));
            }
            return Ok(());
        } else if let Some(t) = p.client.tls.as_mut() {
            // one read of the client's TLS bytes, decrypted; the handshake's answers and any
            // alert go back at once
            self.plain.clear();
            let got = t.read(p.client.fd, &mut self.plain);
            let flushed = t.flush(p.client.fd);
            let t_ns = mono_ns();
            tls_closed = got.map_err(|failure| failure.reason(false))? == Read1::Closed;
            flushed.map_err(|e| format!("write to the client: {e}"))?;
            if self.plain.is_empty() && !tls_closed {
                return rearm(self.ep, id, p); // the handshake under way, or a record not whole yet
            }
            (self.plain.len(), t_ns)
        } else {
            // SAFETY: reads at most buf.len() bytes into buf
            let r = unsafe { libc::recv(p.client.fd, self.buf.as_mut_ptr().cast(), self.buf.len(), 0) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) {
                    return Ok(());
                }
                return Err(format!("client read: {e}"));
            }
            ((r as usize).min(self.buf.len()), mono_ns())
        };
        let plain = p.client.tls.is_some();
        self.forward_read(id, side, n, t_ns, plain, tls_closed, items)
    }

    /// A read's `n` bytes (in `plain` where `from_plain`, else in `buf`) of pair `id`'s `side`,
    /// read at `t_ns`: framed, written on, queued for Python; `tls_closed`: the client's TLS
    /// session ended after them. (Also the bytes a pair begins with: `front.rs`'s fuse.)
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_read(&mut self, id: u64, side: u64, n: usize, t_ns: i64, from_plain: bool,
                               tls_closed: bool, items: &mut Vec<Item>) -> Result<(), String> {
        let Some(p) = self.pairs.get_mut(&id) else { return Ok(()) };
        if n == 0 {
            if side == CLIENT {
                p.client_eof = true;  // a half-close, passed on: the answers still come back
                return rearm(self.ep, id, p);
            }
            return Err(if p.client_eof { "broker closed the connection after the client's end of stream".into() }
                       else { "broker closed the connection".into() });
        }
        let data = if from_plain { &self.plain[..n] } else { &self.buf[..n] };
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
        // the bytes as read go on first (but for answers held whole); what Python must see of them after
        pass_on(p, id, side, data, &out, &mut self.memo, &self.shared, &mut self.wholes, t_ns, items)?;
        if tls_closed {
            p.client_eof = true; // its close_notify after these bytes: a half-close, as an end of stream
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
            let (fresh_records, fresh_ids) = self.stock.records(&self.shared.spare);
            p.wire.drain_native_into(fresh_records, fresh_ids)
        } else {
            p.wire.drain_native()
        };
        if side == CLIENT {
            request_items(p, id, data, out, records, t_ns, t_written_ns, &mut self.stock, &self.shared.spare, items);
        } else {
            answer_items(p, id, data, out, records, t_ns, t_written_ns, &mut self.stock, &self.shared.spare, items);
        }
        Ok(())
    }

    /// A side that had bytes waiting can take more.
    pub(super) fn writable(&mut self, id: u64, side: u64) {
        let Some(p) = self.pairs.get_mut(&id) else { return };
        let (to, what) = if side == CLIENT { (&mut p.client, "client") } else { (&mut p.broker, "broker") };
        if let Err(e) = to.flush(&mut self.wholes) {
            return self.close(id, format!("write to the {what}: {e}"));
        }
        if let Err(e) = rearm(self.ep, id, p) {
            return self.close(id, e);
        }
        self.recount(id); // a write only lowers what it holds: counted, never past a bound
        self.owed_done(id);
    }

    /// A pair whose broker hung up while bytes were owed to the client: once they are written,
    /// its socket is watched again, to be read to its end (what the kernel still holds of it
    /// is owed too); the read of its end closes the pair.
    pub(super) fn owed_done(&mut self, id: u64) {
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
    pub(super) fn broker_hung_up(&mut self, id: u64, reason: String) {
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
    pub(super) fn answered(&mut self) {
        let answers = std::mem::take(&mut *self.shared.answers.lock().unwrap());
        for (id, frame, generation) in answers {
            let Some(p) = self.pairs.get_mut(&id) else { continue };
            if !put_answer(p, frame, generation, &mut self.memo) {
                continue; // nothing asked: an answer to nothing is dropped
            }
            if let Err(e) = p.client.flush(&mut self.wholes) {
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

    // ------------------------------------------------------------ fronts (front.rs)
    pub(super) fn adopt_fronts(&mut self) {
        let added = std::mem::take(&mut *self.shared.fronts.lock().unwrap());
        for (id, reason) in self.fronts.adopt(self.ep, &mut self.buf, added) {
            self.closed_item(id, reason);
        }
        self.ready_items();
    }

    /// A `READY` item for each back whose handshake completed.
    fn ready_items(&mut self) {
        for id in self.fronts.ready() {
            let t = mono_ns();
            self.push(Item { conn: id, kind: READY, t_ns: t, t_written_ns: t, python: Vec::new(), records: None,
                             reason: String::new(), api: None, counts: (0, 0), handed: Vec::new(), digest: None });
        }
    }

    /// A `CLOSED` item for a front, or a pair the relay never took: nothing was counted of it.
    fn closed_item(&self, id: u64, reason: String) {
        let t = mono_ns();
        self.push(Item { conn: id, kind: CLOSED, t_ns: t, t_written_ns: t, python: Vec::new(), records: None, reason,
                         api: None, counts: (0, 0), handed: Vec::new(), digest: None });
    }

    pub(super) fn front_event(&mut self, id: u64, side: u64, flags: u32) {
        if let Some(reason) = self.fronts.event(self.ep, &mut self.buf, id, side, flags) {
            if self.fronts.close(self.ep, id) {
                self.closed_item(id, reason);
            }
        }
        self.ready_items();
    }

    /// Every front, at the relay's stop.
    pub(super) fn close_fronts(&mut self, reason: &str) {
        self.adopt_fronts();
        for id in self.fronts.ids() {
            if self.fronts.close(self.ep, id) {
                self.closed_item(id, reason.into());
            }
        }
    }

    /// A fused pair's beginning on `side` (the side the TLS socket is): Python's bytes its peer
    /// is owed go first, then the peer's bytes Python had not read are that side's first read
    /// (its end, if its session had ended).
    pub(super) fn fused_begins(&mut self, id: u64, side: u64, owed: &[u8], unread: Vec<u8>, done: bool) {
        let mut result = Ok(());
        if let Some(p) = self.pairs.get_mut(&id) {
            if !owed.is_empty() {
                let (to, words) = if side == CLIENT { (&mut p.client, "client") } else { (&mut p.broker, "broker") };
                result = to.write_now(owed).map_err(|e| format!("write to the {words}: {e}"));
            }
        }
        let mut items = Vec::new();
        // a client's end is a half-close after its bytes; a broker's, a read of its own after them
        let client_done = done && side == CLIENT;
        if result.is_ok() && (!unread.is_empty() || client_done) {
            let n = unread.len();
            self.plain = unread;
            result = self.forward_read(id, side, n, mono_ns(), true, client_done, &mut items);
        }
        if result.is_ok() && done && side == BROKER {
            result = self.forward_read(id, side, 0, mono_ns(), true, false, &mut items);
        }
        if result.is_ok() {
            if let Some(p) = self.pairs.get_mut(&id) {
                result = rearm(self.ep, id, p);
            }
        }
        match result {
            Ok(()) => {
                for item in items {
                    self.push(item);
                }
            }
            Err(reason) => self.close(id, reason),
        }
    }

    /// What Python asked for (`wake_fd`): fronts and pairs to adopt, answers, ends.
    pub(super) fn woken(&mut self) {
        clear(self.shared.wake_fd);
        self.adopt_fronts(); // before the pairs: a hand-over may fuse a front taken in the same wake
        self.adopt();
        self.answered();
        let ends = std::mem::take(&mut *self.shared.ends.lock().unwrap());
        for id in ends {
            self.close(id, "closed by the proxy".into());
        }
    }

    pub(super) fn queue_full(&self) -> bool {
        let (items, bytes) = self.shared.queue_max;
        self.shared.queued_items.load(Ordering::Relaxed) >= items || self.shared.queued_bytes.load(Ordering::Relaxed) >= bytes
    }

    /// The queue is full (Python has not drained it: its loop is stalled): no socket is read
    /// until it drains, so that the queue, and what the pairs hold, stay bounded (back-pressure
    /// to every client and broker, as a stalled event loop gives on its own road). Python's asks
    /// are still served; the relay waits on `wake_fd`, which `drain` writes.
    pub(super) fn wait_for_drain(&mut self) {
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

    pub(super) fn run(&mut self) {
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
                if self.fronts.holds(id) {
                    self.front_event(id, side, flags);
                    continue;
                }
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
        self.close_fronts(&reason);
        for id in ids {
            self.close(id, reason.clone());
        }
        bump(self.shared.notify_fd);
    }
}

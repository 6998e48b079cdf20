//! A TLS client's connection before its hand-over (`Relay.front`): the core holds the client's
//! TLS session from its first byte and bridges the plaintext to Python over a socketpair, so the
//! event loop's road (the sniff, the broker connection, the first exchange) runs on plaintext as
//! for any client. At the hand-over (`add` of the socketpair's Python end, recognized by its
//! inode) the two are fused (`fuse`): the pair's client side is the TLS socket and its session,
//! and what was under way in the socketpair either way goes on in order: Python's bytes to the
//! client first, the client's bytes Python had not read yet as the pair's first read.
//!
//! A front's failure (a bad handshake, the client gone) closes both its sockets, and the relay's
//! thread queues a `CLOSED` item under the front's id, in the words of the pair's (`tls handshake
//! failed: ...`); Python closing its end is the proxy's close: the client gets a close_notify.
//! (`Fronts` holds them and says what to report; the thread, `looper.rs`, reports it.)
//!
//! A TLS connection to a broker is the same the other way (`Relay.back`: a *back*): the core
//! holds the session with the broker from its ClientHello, Python reads and writes its plaintext
//! over the bridge, and the hand-over fuses the pair's broker side. A back's handshake, once
//! complete, is reported (a `READY` item: Python counts the broker connected only then, as the
//! event loop's road does after its own handshake); its failure is a `CLOSED` item in the words of
//! a broker's end (`broker tls handshake failed: ...`).

use std::collections::HashMap;
use std::os::fd::RawFd;

use crate::tls::{Read1, TlsSession};
use super::pair::{BROKER, CLIENT};
use super::sys::{epoll_set, nonblocking, write_some};

/// The epoll tokens of a front: `id << 1 | CLIENT` its TLS socket, `id << 1 | PYTHON` the bridge.
pub(super) const PYTHON: u64 = BROKER;

/// The most plaintext a front holds either way before it stops reading that side.
pub(super) const FRONT_HELD_MAX: usize = 256 << 10;

struct Front {
    /// which side of its pair the TLS socket will be: `CLIENT` (a front) or `BROKER` (a back)
    side: u64,
    /// the TLS peer's socket (the client's, or the broker's), and the session with it
    peer: RawFd,
    tls: Box<TlsSession>,
    /// the core's end of the socketpair; and Python's end, as the kernel names it (device, inode)
    bridge: RawFd,
    python_end: (u64, u64),
    /// the peer's plaintext the bridge did not take yet, and Python's the session did not
    to_python: Vec<u8>,
    to_peer: Vec<u8>,
    /// the peer's session ended (close_notify, or its end of stream): Python gets an end of
    /// stream once it has every byte before it
    peer_done: bool,
    shut: bool,
    /// a back's completed handshake was reported (`READY`)
    told_ready: bool,
    armed: [u32; 2],
}

/// A front or back handed over: its id, which side its TLS socket is (`CLIENT`, `BROKER`), that
/// socket and its session, the bridge's two ends' (the core's fd, Python's inode).
pub(super) type FrontAdded = (u64, u64, RawFd, Box<TlsSession>, RawFd, (u64, u64));

/// The (device, inode) of the socket behind `fd`: a socketpair end and its duplicates share it.
pub(super) fn inode(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value for the kernel to overwrite
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st lives for the call; the kernel checks the fd
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// Everything `fd` (non-blocking) holds to read now, appended to `out`: Ok(true) at its end of stream.
fn read_all(fd: RawFd, buf: &mut [u8], out: &mut Vec<u8>) -> std::io::Result<bool> {
    loop {
        // SAFETY: reads at most buf.len() bytes into buf
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock => Ok(false),
                std::io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
        if n == 0 {
            return Ok(true);
        }
        out.extend_from_slice(&buf[..(n as usize).min(buf.len())]);
    }
}

fn close_fds(ep: RawFd, fds: &[RawFd]) {
    for &fd in fds {
        // SAFETY: fds the front owned, given up once (see `Looper::close`)
        unsafe {
            libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
            libc::close(fd);
        }
    }
}

/// The fronts a relay holds, by id. Each call says what the relay's thread must do next: the
/// fronts to report closed (`CLOSED` items under their ids, `Looper::front_closed`).
#[derive(Default)]
pub(super) struct Fronts {
    map: HashMap<u64, Front>,
    /// the backs whose handshake completed since the relay's thread last asked (`ready`)
    ready: Vec<u64>,
}

impl Fronts {
    pub(super) fn holds(&self, id: u64) -> bool {
        self.map.contains_key(&id)
    }

    /// The fronts handed over since the last call, watched from here; those that could not be
    /// (their sockets closed), with why.
    pub(super) fn adopt(&mut self, ep: RawFd, buf: &mut [u8], added: Vec<FrontAdded>) -> Vec<(u64, String)> {
        let mut failed = Vec::new();
        for (id, side, peer, tls, bridge, python_end) in added {
            let set_up = nonblocking(peer).and_then(|()| nonblocking(bridge))
                .and_then(|()| epoll_set(ep, libc::EPOLL_CTL_ADD, peer, libc::EPOLLIN as u32, id << 1 | CLIENT))
                .and_then(|()| epoll_set(ep, libc::EPOLL_CTL_ADD, bridge, libc::EPOLLIN as u32, id << 1 | PYTHON));
            if let Err(e) = set_up {
                close_fds(ep, &[peer, bridge]);
                failed.push((id, format!("relay could not take the connection: {e}")));
                continue;
            }
            self.map.insert(id, Front { side, peer, tls, bridge, python_end, to_python: Vec::new(), to_peer: Vec::new(),
                                        peer_done: false, shut: false, told_ready: false,
                                        armed: [libc::EPOLLIN as u32; 2] });
            if side == BROKER {
                // a back speaks first: its ClientHello goes out now
                if let Err(reason) = self.step(ep, buf, id, CLIENT, false) {
                    self.close(ep, id);
                    failed.push((id, reason));
                }
            }
        }
        failed
    }

    /// The backs whose handshake completed since the last call (each once).
    pub(super) fn ready(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.ready)
    }

    /// Ends front `id`: a close_notify to its peer (as much as its socket takes now), both
    /// sockets closed. False: no such front.
    pub(super) fn close(&mut self, ep: RawFd, id: u64) -> bool {
        let Some(mut f) = self.map.remove(&id) else { return false };
        f.tls.end(f.peer);
        close_fds(ep, &[f.peer, f.bridge]);
        true
    }

    /// Every front's id.
    pub(super) fn ids(&self) -> Vec<u64> {
        self.map.keys().copied().collect()
    }

    /// An epoll event of front `id`'s `side` (`CLIENT`: its TLS socket, whichever its peer;
    /// `PYTHON`: the bridge), `buf` a scratch buffer: why the front ends, if it does.
    pub(super) fn event(&mut self, ep: RawFd, buf: &mut [u8], id: u64, side: u64, flags: u32) -> Option<String> {
        let result = if flags & (libc::EPOLLIN | libc::EPOLLOUT) as u32 != 0 {
            self.step(ep, buf, id, side, flags & libc::EPOLLIN as u32 != 0)
        } else if side == CLIENT {
            let broker = self.map.get(&id).is_some_and(|f| f.side == BROKER);
            Err(format!("{} closed the connection", if broker { "broker" } else { "client" }))
        } else {
            Err("closed by the proxy".into())
        };
        result.err()
    }

    /// Moves what can move both ways (reading `side` if `readable`), then sets each socket's interest.
    fn step(&mut self, ep: RawFd, buf: &mut [u8], id: u64, side: u64, readable: bool) -> Result<(), String> {
        let Some(f) = self.map.get_mut(&id) else { return Ok(()) };
        let broker = f.side == BROKER;
        let peer_words = if broker { "broker" } else { "client" };
        if readable && side == CLIENT {
            let got = f.tls.read(f.peer, &mut f.to_python);
            let _ = f.tls.flush(f.peer); // the handshake's answers, an alert
            if got.map_err(|failure| failure.reason(broker))? == Read1::Closed {
                f.peer_done = true;
            }
        }
        if broker && !f.told_ready && !f.tls.handshaking() {
            f.told_ready = true;
            self.ready.push(id);
        }
        if readable && side == PYTHON {
            // SAFETY: reads at most buf.len() bytes into buf
            let n = unsafe { libc::recv(f.bridge, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n == 0 {
                return Err("closed by the proxy".into());
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) {
                    return Err(format!("proxy side read: {e}"));
                }
            } else {
                f.to_peer.extend_from_slice(&buf[..(n as usize).min(buf.len())]);
            }
        }
        // the peer's plaintext to Python, Python's through the session to the peer
        let k = write_some(f.bridge, &f.to_python).map_err(|e| format!("write to the proxy side: {e}"))?;
        f.to_python.drain(..k);
        let k = f.tls.take(&f.to_peer);
        f.to_peer.drain(..k);
        f.tls.flush(f.peer).map_err(|e| format!("write to the {peer_words}: {e}"))?;
        if f.peer_done && f.to_python.is_empty() && !f.shut {
            f.shut = true;
            // SAFETY: the front's own fd
            unsafe { libc::shutdown(f.bridge, libc::SHUT_WR) };
        }
        let want = [
            // the peer: read while Python has taken what came before; write while TLS bytes wait
            (if f.to_python.len() < FRONT_HELD_MAX && !f.peer_done { libc::EPOLLIN as u32 } else { 0 })
                | (if f.tls.wants_write() || !f.to_peer.is_empty() { libc::EPOLLOUT as u32 } else { 0 }),
            // the bridge: read while the session takes Python's bytes; write while the peer's wait
            (if f.to_peer.len() < FRONT_HELD_MAX { libc::EPOLLIN as u32 } else { 0 })
                | (if f.to_python.is_empty() { 0 } else { libc::EPOLLOUT as u32 }),
        ];
        for (i, (fd, token)) in [(f.peer, id << 1 | CLIENT), (f.bridge, id << 1 | PYTHON)].into_iter().enumerate() {
            if f.armed[i] != want[i] {
                f.armed[i] = want[i];
                epoll_set(ep, libc::EPOLL_CTL_MOD, fd, want[i], token).map_err(|e| format!("relay epoll: {e}"))?;
            }
        }
        Ok(())
    }

    /// The hand-over of the front (or back: `side`) whose Python end is `python_fd` (a
    /// duplicate, the caller's to close), if there is one: its TLS socket and session; the bytes
    /// Python wrote that the peer is still owed, in order; the peer's bytes Python had not read
    /// (the pair's first read of that side); whether the peer's session had ended. The front is
    /// gone from the epoll set and its bridge closed.
    pub(super) fn fuse(&mut self, ep: RawFd, buf: &mut [u8], python_fd: RawFd, side: u64)
                       -> Option<Result<Fused, String>> {
        let key = inode(python_fd)?;
        let id = self.map.iter().find(|(_, f)| f.python_end == key && f.side == side).map(|(&id, _)| id)?;
        let mut f = self.map.remove(&id)?;
        let mut owed = std::mem::take(&mut f.to_peer);
        let mut unread = Vec::new();
        // Python's writes the front had not read yet, then the peer's bytes Python had not
        // read (in its socket), then those the bridge had not taken
        let drained = read_all(f.bridge, buf, &mut owed).and_then(|_| read_all(python_fd, buf, &mut unread));
        unread.extend_from_slice(&f.to_python);
        // SAFETY: the front's fd; the peer's socket stays open, the pair's from here
        unsafe {
            libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, f.peer, std::ptr::null_mut());
        }
        close_fds(ep, &[f.bridge]);
        if let Err(e) = drained {
            f.tls.end(f.peer);
            close_fds(ep, &[f.peer]);
            return Some(Err(format!("relay could not take the connection: {e}")));
        }
        Some(Ok(Fused { peer: f.peer, tls: f.tls, owed, unread, peer_done: f.peer_done }))
    }
}

/// A front (or back) fused into a pair at its hand-over (`Looper::adopt_pairs`).
pub(super) struct Fused {
    pub(super) peer: RawFd,
    pub(super) tls: Box<TlsSession>,
    pub(super) owed: Vec<u8>,
    pub(super) unread: Vec<u8>,
    pub(super) peer_done: bool,
}

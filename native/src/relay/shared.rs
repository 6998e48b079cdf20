//! What Python's thread and the relay's share (`Shared`): the queue, the pairs handed over and
//! the asks not served yet, the counters, the eventfds.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use rustls::{ClientConfig, ServerConfig};

use crate::tls::TlsSession;
use super::front::FrontAdded;
use super::pair::Stats;
use super::queue::Item;
use super::spare::Spare;



/// A pair handed over: its id, the client's and the broker's fds, and the client's TLS session
/// where the core carries its TLS.
pub(super) type Added = (u64, RawFd, RawFd, Option<Box<TlsSession>>);

/// Python's answer to an answer held whole: the pair, the frame, the generation to remember it
/// at (`memo.rs`).
pub(super) type Answer = (u64, Vec<u8>, Option<u64>);

pub(super) struct Shared {
    pub(super) queue: Mutex<Vec<Item>>,
    /// the queue's buffer from the drain before the last, emptied, for the next drain to swap in
    pub(super) queue_spare: Mutex<Vec<Item>>,
    /// buffers of drained items, for the relay's thread to fill again (`Spare`)
    pub(super) spare: Mutex<Spare>,
    /// pairs handed over and not adopted yet; None once the relay's thread has ended (`add` is
    /// refused from then: nothing would own the fds)
    pub(super) added: Mutex<Option<Vec<Added>>>,
    /// TLS connections taken from their first byte (`front`, `back`) and not adopted yet
    pub(super) fronts: Mutex<Vec<FrontAdded>>,
    /// the listener's TLS settings for the fronts from here (`tls_config`; a reload replaces them)
    pub(super) tls_config: Mutex<Option<Arc<ServerConfig>>>,
    /// the brokers' TLS settings for the backs from here (`upstream_tls_config`)
    pub(super) upstream_tls_config: Mutex<Option<Arc<ClientConfig>>>,
    pub(super) answers: Mutex<Vec<Answer>>,
    /// Python's generation of the brokers it knows (`set_generation`): the memo repeats an
    /// answer that teaches only at the generation it was remembered at
    pub(super) generation: AtomicU64,
    /// pairs Python ends (`end`)
    pub(super) ends: Mutex<Vec<u64>>,
    pub(super) stats: Mutex<HashMap<u64, Arc<Stats>>>,
    /// reads of broker sockets stamped by the kernel, and by the clock (no stamp came with them)
    pub(super) kernel_reads: AtomicU64,
    pub(super) clock_reads: AtomicU64,
    /// the answers the memo rewrote, by api key
    pub(super) memo_rewrites: Mutex<HashMap<i16, u64>>,
    pub(super) stop: AtomicBool,
    /// when Python is to be woken for the batch under way (monotonic ns; 0: no batch under way,
    /// which `drain` sets), and the bytes for Python queued since the last drain
    pub(super) notify_at: AtomicI64,
    pub(super) queued_bytes: AtomicUsize,
    pub(super) queued_items: AtomicUsize,
    /// how often the queue was full and the relay stopped reading until Python drained it, and
    /// whether it is stopped now (`drain` wakes it)
    pub(super) queue_full: AtomicU64,
    pub(super) paused: AtomicBool,
    /// the queue's bound: items, bytes for Python (`QUEUE_MAX_*` unless the tests ask less)
    pub(super) queue_max: (usize, usize),
    /// the most one pair, and all pairs, may hold (`HELD_MAX_*` unless the tests ask less)
    pub(super) held_max: (usize, usize),
    /// the bytes all pairs hold now (`Looper::held_total`, for Python's gauge)
    pub(super) held_now: AtomicUsize,
    pub(super) wake_fd: RawFd,
    pub(super) notify_fd: RawFd,
    pub(super) urgent_fd: RawFd,
}

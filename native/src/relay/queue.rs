//! The queue from the relay's thread to Python: what one read gives Python to see (`Item`),
//! its kinds and parts as `drain` lays them out, and its wake and bound constants.

use std::sync::Arc;

use crate::digest::Digest;


/// What `drain` names a queued item's kind by.
pub const FROM_CLIENT: i64 = 0;

pub const FROM_BROKER: i64 = 1;

pub const CLOSED: i64 = 2;

pub const REWRITE: i64 = 3;

/// A back's handshake with its broker completed (`front.rs`): Python counts the broker connected.
pub const READY: i64 = 4;

/// An answer held whole that the core answered itself, as Python answered it before (`memo.rs`):
/// Python learns from it what it learns from rewriting it (brokers, topic ids, leaders), in order.
pub const LEARN: i64 = 5;

/// How many i64s an item's fixed fields take in a drain's `heads` (`PyRelay::drain`).
pub const ITEM_WIDTH: usize = 10;

/// Which of an item's variable parts follow in a drain's `parts` (its `present` field).
pub const HAS_DATA: i64 = 1;

pub const HAS_RECORDS: i64 = 2;

pub const HAS_HANDED: i64 = 4;

pub const HAS_DIGEST: i64 = 8;

pub const HAS_REASON: i64 = 16;

/// A read's records (`Wire`'s layout) and the client ids they index.
pub(super) type Records = (Vec<i64>, Vec<Arc<[u8]>>);

/// What Python must see of one read, or the end of a pair.
pub(super) struct Item {
    pub(super) conn: u64,
    pub(super) kind: i64,
    pub(super) t_ns: i64,
    /// when the read's bytes went to the other side's socket (or, where it took only part of
    /// them, when the rest were put aside for it)
    pub(super) t_written_ns: i64,
    pub(super) python: Vec<u8>,
    pub(super) records: Option<Records>,
    pub(super) reason: String,
    /// a REWRITE's request: (api key, api version)
    pub(super) api: Option<(i16, i16)>,
    /// the bytes read from the client, and written to it (the broker's, an answer held whole
    /// counted as the answer written in its place), since the pair was added
    pub(super) counts: (u64, u64),
    /// the `(read, written)` stamps of the earlier reads whose bytes this item gathers (`Gather`)
    pub(super) handed: Vec<i64>,
    /// the digest of the Fetch answer under way, which ended in this read (`Gather`): Python
    /// takes it before the item's bytes
    pub(super) digest: Option<Digest>,
}

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
/// The most one pair may hold after a read (bytes waiting for a socket, an answer held whole, a
/// message gathered or digested: about 10 MiB at worst for a real one), and all pairs together;
/// past either the pair ends, counted (`relay buffers`).
pub const HELD_MAX_PAIR: usize = 16 << 20;
pub const HELD_MAX_TOTAL: usize = 256 << 20;

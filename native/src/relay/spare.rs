//! The buffers of drained items, handed back for the relay's thread to fill again (`Spare`),
//! and that thread's own stock of them (`Stock`).

use std::sync::Arc;
use std::sync::Mutex;



/// The buffers of drained items, emptied on Python's thread and handed back for the relay's
/// thread to fill again: a connection's per-read buffers are reused, rather than made on the
/// relay's thread and freed on Python's each time (which leaves each thread's allocator holding
/// chunks of the other's arena: the fifteenth soak's free memory rose on this road,
/// `docs/reliability.md`). Beyond `SPARE_KEPT` of a kind, `SPARE_MAX_BYTES` for one buffer, or
/// `SPARE_HELD_BYTES` for them all, they are freed.
#[derive(Default)]
pub(super) struct Spare {
    pub(super) bytes: Vec<Vec<u8>>,
    pub(super) words: Vec<Vec<i64>>,
    pub(super) ids: Vec<Vec<Arc<[u8]>>>,
    /// the capacity of every buffer kept, in bytes
    pub(super) held: usize,
}

/// How many of each kind are kept, the largest kept (bigger ones are freed), and the most kept in
/// all. Bounded by count alone (256 of each, up to 256 KiB each), a burst of small produce
/// requests left the pool holding about 20 MB (the relay road's RSS 123 MB after 100 000 of them,
/// against the event loop's 95; `docs/performance.md`). There are two pools (the relay thread's
/// stock and the one Python hands back to), so at most twice this is held.
pub(super) const SPARE_KEPT: usize = 256;

pub(super) const SPARE_MAX_BYTES: usize = 256 << 10;

pub const SPARE_HELD_BYTES: usize = 2 << 20;

/// The most an answer held whole reserves for itself when it begins, and the largest written
/// buffer kept for one (`Wholes`).
pub(super) const WHOLE_MAX_BYTES: usize = 8 << 20;
/// The smallest written buffer worth keeping for an answer held whole.
const WHOLE_MIN_BYTES: usize = 64 << 10;
/// How many written buffers are kept: at most 16 MiB.
const WHOLES_KEPT: usize = 2;

/// Big buffers a side has written out, kept on the relay's thread for the next answer held whole
/// (`held.rs`): a central proxy's held Fetch answers, each gathered in fresh memory, took a page
/// fault every 4 KiB.
#[derive(Default)]
pub(super) struct Wholes(Vec<Vec<u8>>);

impl Wholes {
    /// Keeps `v`, written out, if it is worth keeping and there is room.
    pub(super) fn keep(&mut self, mut v: Vec<u8>) {
        if self.0.len() < WHOLES_KEPT && (WHOLE_MIN_BYTES..=WHOLE_MAX_BYTES).contains(&v.capacity()) {
            v.clear();
            self.0.push(v);
        }
    }

    pub(super) fn take(&mut self) -> Option<Vec<u8>> {
        self.0.pop()
    }
}

impl Spare {
    /// Keeps what is worth keeping of the buffers given (emptied).
    pub(super) fn keep(&mut self, bytes: Vec<Vec<u8>>, words: Vec<Vec<i64>>, ids: Vec<Vec<Arc<[u8]>>>) {
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

    pub(super) fn room(&self, size: usize) -> bool {
        self.held + size <= SPARE_HELD_BYTES
    }

    pub(super) fn take_bytes(&mut self) -> Option<Vec<u8>> {
        let b = self.bytes.pop()?;
        self.held -= b.capacity();
        Some(b)
    }

    pub(super) fn take_records(&mut self) -> (Vec<i64>, Vec<Arc<[u8]>>) {
        let w = self.words.pop().unwrap_or_default();
        let i = self.ids.pop().unwrap_or_default();
        self.held -= w.capacity() * std::mem::size_of::<i64>() + i.capacity() * std::mem::size_of::<Arc<[u8]>>();
        (w, i)
    }
}

/// The relay thread's own stock of spare buffers, refilled from `Shared::spare` when it runs out.
#[derive(Default)]
pub(super) struct Stock {
    pub(super) spare: Spare,
}

impl Stock {
    pub(super) fn refill(&mut self, handed_back: &Mutex<Spare>) {
        std::mem::swap(&mut self.spare, &mut *handed_back.lock().unwrap());
    }

    pub(super) fn bytes(&mut self, handed_back: &Mutex<Spare>) -> Vec<u8> {
        if self.spare.bytes.is_empty() {
            self.refill(handed_back);
        }
        self.spare.take_bytes().unwrap_or_default()
    }

    pub(super) fn records(&mut self, handed_back: &Mutex<Spare>) -> (Vec<i64>, Vec<Arc<[u8]>>) {
        if self.spare.words.is_empty() || self.spare.ids.is_empty() {
            self.refill(handed_back);
        }
        self.spare.take_records()
    }
}

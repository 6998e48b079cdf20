//! Python's answers to the answers held whole, repeated by the core for the same question (`Memo`).

use std::collections::VecDeque;

use crate::wire::API_VERSIONS;

/// Python's answers to the answers held whole, by what they answered: a repeat (the same api,
/// version and bytes past the correlation id: every connection's ApiVersions, a client's
/// periodic Metadata) is answered by the core at once, with the repeat's own correlation id, as
/// Python answered the first. `MEMO_ENTRIES` answers at most, each of `MEMO_MAX_BYTES` at most
/// (the rewriter's own cache's bounds).
///
/// The rewrite of an answer depends on its bytes alone (each broker's address becomes the
/// proxy's listener for its node id, fixed by the configuration), so a repeat's bytes are
/// always Python's. What Python learns from it is not: an answer that names brokers, leaders or
/// topics (Metadata, FindCoordinator, DescribeCluster, held by a proxy away from its brokers) is
/// remembered with Python's generation of the brokers it knows, and repeated only while that
/// generation holds (a broker that moved, and moved back, is learned again from the answer that
/// says so); the core queues it for Python to learn from, in order with every other item
/// (`LEARN`). An answer Python could not read, or gave no generation for, is never repeated.
/// ApiVersions teaches nothing: it is repeated at any generation, and not queued.
pub(super) struct Memo {
    pub(super) entries: VecDeque<Remembered>,
}

pub(super) struct Remembered {
    pub(super) api: (i16, i16),
    pub(super) asked: Vec<u8>,
    pub(super) answer: Vec<u8>,
    pub(super) rewritten: bool,
    /// the generation it holds at (None: at any, an ApiVersions answer)
    pub(super) generation: Option<u64>,
}

pub(super) const MEMO_ENTRIES: usize = 64;

pub(super) const MEMO_MAX_BYTES: usize = 256 << 10;

/// A memo's repeat of an answer: the frame to write, whether it was a rewrite, and whether
/// Python must learn from it (`LEARN`).
pub(super) struct Repeat {
    pub(super) frame: Vec<u8>,
    pub(super) rewritten: bool,
    pub(super) learns: bool,
}

impl Memo {
    /// The frame (size prefix included) answering `whole` (a held answer, size prefix included),
    /// if Python answered the same before, at `generation` for an answer that teaches.
    pub(super) fn answer(&self, api: (i16, i16), whole: &[u8], generation: u64) -> Option<Repeat> {
        let body = whole.get(8..)?;
        let m = self.entries.iter().find(|m| m.api == api && m.asked == body)?;
        if m.generation.is_some_and(|g| g != generation) {
            return None;
        }
        let mut frame = Vec::with_capacity(8 + m.answer.len());
        frame.extend_from_slice(&((4 + m.answer.len()) as u32).to_be_bytes());
        frame.extend_from_slice(&whole[4..8]);
        frame.extend_from_slice(&m.answer);
        Some(Repeat { frame, rewritten: m.rewritten, learns: m.generation.is_some() })
    }

    /// Python's answer `frame` to the held answer `key`, at Python's `generation` (None: not to
    /// be repeated, but for ApiVersions).
    pub(super) fn remember(&mut self, key: (i16, i16, Vec<u8>), frame: &[u8], generation: Option<u64>) {
        let (k, v, asked) = key;
        if k != API_VERSIONS && generation.is_none() {
            return; // an answer that teaches, which Python would not have repeated
        }
        let generation = generation.filter(|_| k != API_VERSIONS);
        let Some(answer) = frame.get(8..) else { return };
        if asked.len() > MEMO_MAX_BYTES || answer.len() > MEMO_MAX_BYTES {
            return;
        }
        self.entries.retain(|m| !(m.api == (k, v) && m.asked == asked)); // an older generation's
        if self.entries.len() >= MEMO_ENTRIES {
            self.entries.pop_front(); // the oldest
        }
        let rewritten = answer != asked.as_slice();
        self.entries.push_back(Remembered { api: (k, v), asked, answer: answer.to_vec(), rewritten, generation });
    }
}

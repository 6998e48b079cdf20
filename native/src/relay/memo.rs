//! Python's answers to the ApiVersions answers held whole, repeated by the core for the same question (`Memo`).

use std::collections::VecDeque;

use crate::wire::API_VERSIONS;

/// Python's answers to the ApiVersions answers held whole, by what they answered: a repeat (the
/// same version and bytes past the correlation id: every connection's ApiVersions) is answered by
/// the core at once, with the repeat's own correlation id, as Python answered the first.
/// `MEMO_ENTRIES` answers at most, each of `MEMO_MAX_BYTES` at most (the rewriter's own cache's bounds).
///
/// ApiVersions only: an answer that names brokers or leaders (Metadata, FindCoordinator,
/// DescribeCluster, a proxy away from its brokers holds them whole) teaches Python what it
/// names as Python rewrites it, and a repeat of an older answer must teach it again (a broker
/// that moved back, a leader that changed twice); Python's rewriter keeps its own cache of those.
pub(super) struct Memo {
    pub(super) entries: VecDeque<Remembered>,
}

pub(super) struct Remembered {
    pub(super) api: (i16, i16),
    pub(super) asked: Vec<u8>,
    pub(super) answer: Vec<u8>,
    pub(super) rewritten: bool,
}

pub(super) const MEMO_ENTRIES: usize = 64;

pub(super) const MEMO_MAX_BYTES: usize = 256 << 10;

impl Memo {
    /// The frame (size prefix included) answering `whole` (a held answer, size prefix included),
    /// if Python answered the same before; and whether that answer was a rewrite.
    pub(super) fn answer(&self, api: (i16, i16), whole: &[u8]) -> Option<(Vec<u8>, bool)> {
        if api.0 != API_VERSIONS {
            return None;
        }
        let body = whole.get(8..)?;
        let m = self.entries.iter().find(|m| m.api == api && m.asked == body)?;
        let mut frame = Vec::with_capacity(8 + m.answer.len());
        frame.extend_from_slice(&((4 + m.answer.len()) as u32).to_be_bytes());
        frame.extend_from_slice(&whole[4..8]);
        frame.extend_from_slice(&m.answer);
        Some((frame, m.rewritten))
    }

    pub(super) fn remember(&mut self, key: (i16, i16, Vec<u8>), frame: &[u8]) {
        let (k, v, asked) = key;
        let Some(answer) = frame.get(8..).filter(|_| k == API_VERSIONS) else { return };
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

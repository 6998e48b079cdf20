//! The body of a message routed to the Python road, gathered over the reads it arrives in, or
//! digested as it comes (`Gather`, `digest.rs`), and the bytes of a read the Python road is fed
//! (`route.rs` says, read by read, what Python must see).

use crate::digest::{Digest, Digester};
use crate::wire::{Routed, Wire, PEEK_BYTES};
pub(super) use crate::wire::{FETCH, PRODUCE};
use super::queue::{FROM_BROKER, Item};


/// The body of an answer routed to the Python road, gathered over the reads it arrives in
/// (`Routed::open_from`): Python is handed it in one piece when it ends (or every
/// `GATHER_BYTES`), so an answer read in many pieces costs Python one item, not one a read. Its
/// size and correlation id go to Python with the read they end in (the Python road dates an
/// answer's first byte by it).
///
/// A Fetch answer is not gathered but digested as it comes (`digest.rs`, `Digester`): its
/// records are walked where they were read, and Python is handed the digest instead of the
/// bytes; no record crosses into Python, nor is copied.
pub(super) struct Gather {
    pub(super) bytes: Vec<u8>,
    /// `(read, written)` of each read gathered
    pub(super) handed: Vec<i64>,
    /// the digest under way of the Fetch answer, or the Produce request (None: its bytes are
    /// gathered; a Produce's are until its first bytes are in, and then only those are kept)
    pub(super) digester: Option<Digester>,
    /// a request's first bytes were read for a digest (whether one came of it or not)
    pub(super) tried: bool,
}

impl Gather {
    /// The bytes it keeps now: those gathered, and its digest's.
    pub(super) fn held(&self) -> usize {
        self.bytes.len() + self.digester.as_ref().map_or(0, Digester::held)
    }

    pub(super) fn new(bytes: Vec<u8>) -> Self {
        Gather { bytes, handed: Vec::new(), digester: None, tried: false }
    }
}

/// A request gathered from its size prefix: once its first bytes are in, a Produce the codec
/// reads that is bigger than them goes on as a digest (`Digester::produce`) of its body, and
/// only its size prefix and first bytes stay gathered (for its header, Python's to read).
pub(super) fn digest_request(g: &mut Gather, wire: &Wire) {
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

/// The bytes of `data` the Python road is fed (`Routed`), after `v`'s, up to offset `upto` of the
/// chunk (`data.len()` or more: all of them).
pub(super) fn routed_bytes(mut v: Vec<u8>, data: &[u8], out: &Routed, upto: usize) -> Vec<u8> {
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
pub(super) fn digest_ended(mut d: Digester, data: &[u8], out: &mut Routed) -> Digest {
    let end = out.ended_at.unwrap_or(0).min(data.len());
    d.feed(&data[..end]);
    out.spans.retain_mut(|span| { span.0 = span.0.max(end); span.0 < span.1 });
    d.finish().unwrap_or_default()
}

/// The item that hands Python an answer's body gathered so far: dated by its last read, with the
/// stamps of the reads before it; None when nothing was gathered (or it is digested).
pub(super) fn gathered(conn: u64, mut g: Gather, counts: (u64, u64)) -> Option<Item> {
    if g.handed.len() < 2 || g.digester.is_some() {
        return None;
    }
    let t_written_ns = g.handed.pop().unwrap_or(0);
    let t_ns = g.handed.pop().unwrap_or(0);
    Some(Item { conn, kind: FROM_BROKER, t_ns, t_written_ns, python: g.bytes, records: None, reason: String::new(),
                api: None, counts, handed: g.handed, digest: None })
}

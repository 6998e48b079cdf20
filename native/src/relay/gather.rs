//! What Python must see of a read (`request_items`, `answer_items`): the records of the
//! exchanges the core settled alone, the bytes the Python road is fed, and the body of a message
//! routed to it, gathered over the reads it arrives in or digested as it comes (`Gather`,
//! `digest.rs`), handed over when it ends.

use std::sync::Mutex;

use crate::digest::{Digest, Digester};
use crate::wire::{Routed, Wire, PEEK_BYTES};
pub(super) use crate::wire::{FETCH, PRODUCE};
use super::pair::Pair;
use super::queue::{FROM_BROKER, FROM_CLIENT, Item, Records};
use super::spare::{Spare, Stock};


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

/// What Python must see of a read of the client's `data` (read at `t_ns`, written on at
/// `t_written_ns`, framed: `out`), with the `records` of the exchanges it settled alone, to
/// `items`: a request the Python road parses that goes on past this read is gathered (whole, up
/// to `GATHER_BYTES`), a big Produce digested (the Python road dates a request by its last byte,
/// and parses it whole); one that ended in this read goes first (its bytes or its digest), then
/// the rest of what is routed.
#[allow(clippy::too_many_arguments)]
pub(super) fn request_items(p: &mut Pair, id: u64, data: &[u8], mut out: Routed, records: Option<Records>, t_ns: i64,
                            t_written_ns: i64, stock: &mut Stock, spare: &Mutex<Spare>, items: &mut Vec<Item>) {
    let n = data.len();
    let open = if out.rest.is_none() { out.open_from } else { None };
    let gathered_before = p.gather_rq.take();
    if open == Some(0) {
        // the request gathered (or one begun in an earlier read) goes on through the whole read
        let mut g = gathered_before.unwrap_or_else(|| Gather::new(stock.bytes(spare)));
        match g.digester.as_mut() {
            Some(d) => d.feed(data), // its route was known before: nothing `held`
            None => {
                g.bytes = routed_bytes(std::mem::take(&mut g.bytes), data, &out, n);
                digest_request(&mut g, &p.wire);
            }
        }
        let counts = p.stats.counts();
        if g.digester.is_none() && g.bytes.len() >= GATHER_BYTES {
            items.push(Item { conn: id, kind: FROM_CLIENT, t_ns, t_written_ns: t_ns, python: g.bytes, records,
                              reason: String::new(), api: None, counts, handed: Vec::new(), digest: None });
            return;
        }
        p.gather_rq = Some(g);
        if records.is_some() {
            items.push(Item { conn: id, kind: FROM_CLIENT, t_ns, t_written_ns: t_ns, python: Vec::new(), records,
                              reason: String::new(), api: None, counts, handed: Vec::new(), digest: None });
        }
        return;
    }
    // the request gathered ended in this read: it (or its digest) first, then the rest routed
    let mut digested = None;
    let before = match gathered_before {
        Some(Gather { bytes, digester: Some(d), .. }) => {
            digested = Some(Digest { head: bytes, ..digest_ended(d, data, &mut out) });
            Vec::new()
        }
        Some(g) => g.bytes,
        None => Vec::new(),
    };
    let before = if before.is_empty() && !out.is_empty() { stock.bytes(spare) } else { before };
    let python = if out.is_empty() { before } else { routed_bytes(before, data, &out, open.unwrap_or(n)) };
    if let Some(q) = open {
        let mut g = Gather::new(stock.bytes(spare));
        g.bytes.extend_from_slice(&data[q..]);
        digest_request(&mut g, &p.wire);
        p.gather_rq = Some(g);
    }
    if python.is_empty() && records.is_none() && digested.is_none() {
        return;
    }
    items.push(Item { conn: id, kind: FROM_CLIENT, t_ns, t_written_ns, python, records, reason: String::new(),
                      api: None, counts: p.stats.counts(), handed: Vec::new(), digest: digested });
}

/// What Python must see of a read of the broker's `data` (as `request_items`): the body of an
/// answer the Python road parses that goes on past this read is gathered, a Fetch answer's
/// digested as it comes (`digest.rs`); one that ended in this read goes first (its body or its
/// digest, with the stamps of the reads it came in), then the rest of what is routed.
#[allow(clippy::too_many_arguments)]
pub(super) fn answer_items(p: &mut Pair, id: u64, data: &[u8], mut out: Routed, records: Option<Records>, t_ns: i64,
                           t_written_ns: i64, stock: &mut Stock, spare: &Mutex<Spare>, items: &mut Vec<Item>) {
    let n = data.len();
    let open = if out.rest.is_none() { out.open_from } else { None };
    if let (Some(g), Some(0)) = (p.gather.as_mut(), open) {
        // the answer gathered goes on through the whole read
        g.handed.extend_from_slice(&[t_ns, t_written_ns]);
        match g.digester.as_mut() {
            Some(d) => d.feed(data),
            None => {
                g.bytes = routed_bytes(std::mem::take(&mut g.bytes), data, &out, n);
                if g.bytes.len() >= GATHER_BYTES {
                    let g = std::mem::replace(g, Gather::new(Vec::new()));
                    items.extend(gathered(id, g, p.stats.counts()));
                }
            }
        }
        return;
    }
    // an answer gathered that ended in this read: its body (or its digest) first, then the
    // rest of what is routed
    let mut before = Vec::new();
    let mut digested = None;
    let handed = match p.gather.take() {
        Some(g) => {
            match g.digester {
                Some(d) => digested = Some(digest_ended(d, data, &mut out)),
                None => before = g.bytes,
            }
            g.handed
        }
        None => Vec::new(),
    };
    if before.is_empty() && !out.is_empty() {
        before = stock.bytes(spare); // a spare buffer, filled by routed_bytes
    }
    let python = if out.is_empty() { before } else { routed_bytes(before, data, &out, open.unwrap_or(n)) };
    if let Some(q) = open {
        // an answer the Python road parses begins its body here: a Fetch answer's digested
        // from here on, another's gathered
        let body = (n - q).saturating_add(p.wire.answer_left());
        let digester = p.wire.answer_api().and_then(|(k, v)| if k == FETCH { Digester::new(v, body) } else { None });
        let mut bytes = Vec::new();
        match digester {
            Some(mut d) => {
                d.feed(&data[q..]);
                p.gather = Some(Gather { digester: Some(d), ..Gather::new(bytes) });
            }
            None => {
                bytes.reserve(p.wire.answer_left().saturating_add(n - q).min(GATHER_BYTES));
                bytes.extend_from_slice(&data[q..]);
                p.gather = Some(Gather::new(bytes));
            }
        }
    }
    if python.is_empty() && records.is_none() && digested.is_none() {
        return;
    }
    items.push(Item { conn: id, kind: FROM_BROKER, t_ns, t_written_ns, python, records, reason: String::new(),
                      api: None, counts: p.stats.counts(), handed, digest: digested });
}

//! What Python must see of a read (`request_items`, `answer_items`): the records of the
//! exchanges the core settled alone, the bytes the Python road is fed, and the body of a message
//! routed to it, gathered over the reads it arrives in or digested as it comes (`gather.rs`),
//! handed over when it ends.

use std::sync::Mutex;

use crate::digest::{Digest, Digester};
use crate::wire::Routed;
use super::gather::{digest_ended, digest_request, gathered, routed_bytes, Gather, FETCH, GATHER_BYTES};
use super::pair::Pair;
use super::queue::{FROM_BROKER, FROM_CLIENT, Item, Records};
use super::spare::{Spare, Stock};

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

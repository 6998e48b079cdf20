//! A read written on: its bytes go to the other side as they came, but for the answers held
//! whole for the rewriter (`Routed::whole`: a sidecar's ApiVersions; a central proxy's every
//! answer that names brokers). One is gathered in the pair's `whole` across its reads, nothing
//! after it going to the client meanwhile (its place kept in the queue: `Seg::Answer`), and once
//! whole it is sent on as it came (a Fetch or Produce answer that names no broker:
//! `endpoints.rs`), repeated from the memo (`memo.rs`; queued for Python to learn from where it
//! teaches: `LEARN`), or asked of Python (`REWRITE`), whose answer goes in its place
//! (`put_answer`).

use std::sync::atomic::Ordering;

use crate::endpoints::{answer_layouts, names_brokers};
use crate::wire::Routed;
use super::memo::{Memo, Repeat};
use super::pair::{Pair, Seg, CLIENT};
use super::queue::{Item, LEARN, REWRITE};
use super::shared::Shared;
use super::spare::{Wholes, WHOLE_MAX_BYTES};

/// `data`, read from pair `id`'s `side` at `t_ns` and framed (`out`), written on to the other
/// side (what its socket does not take waits in its queue); the asks of the answers it completes
/// go to `items`. An error is why the pair ends.
#[allow(clippy::too_many_arguments)]
pub(super) fn pass_on(p: &mut Pair, id: u64, side: u64, data: &[u8], out: &Routed, memo: &mut Memo, shared: &Shared,
                      wholes: &mut Wholes, t_ns: i64, items: &mut Vec<Item>) -> Result<(), String> {
    let n = data.len();
    let to = if side == CLIENT { &mut p.broker } else { &mut p.client };
    let write_err = if side == CLIENT { "write to the broker" } else { "write to the client" };
    if out.whole.is_empty() && to.queue.is_empty() {
        return to.write_now(data).map_err(|e| format!("{write_err}: {e}"));
    }
    let mut at = 0;
    for &(start, end, ends) in &out.whole {
        if start > at {
            to.queue.push_back(Seg::Bytes(data[at..start].to_vec()));
        }
        if p.whole.is_empty() {
            to.queue.push_back(Seg::Answer { asked: false, key: None });
            if p.whole.capacity() == 0 {
                if let Some(v) = wholes.take() {
                    p.whole = v; // a buffer written out before: its pages are the process's already
                }
            }
            if ends.is_none() {
                // room for the whole answer at once (up to WHOLE_MAX_BYTES): not grown by doubling
                // and copied over as its reads come
                p.whole.reserve((end - start).saturating_add(p.wire.answer_left()).min(WHOLE_MAX_BYTES));
            }
        }
        p.whole.extend_from_slice(&data[start..end]);
        if let Some(api) = ends {
            let whole = std::mem::take(&mut p.whole);
            // a Fetch or Produce answer that names no broker goes on as it came, at once
            let unchanged = answer_layouts(api.0).is_some_and(|l| !names_brokers(l, api.1, &whole[8..]));
            let generation = shared.generation.load(Ordering::Relaxed);
            let (known, whole) = if unchanged {
                (Some(Repeat { frame: whole, rewritten: false, learns: false }), Vec::new())
            } else {
                (memo.answer(api, &whole, generation), whole)
            };
            let slot = to.queue.iter_mut().rev().find(|s| matches!(s, Seg::Answer { .. }));
            match (known, slot) {
                (Some(Repeat { frame, rewritten, learns }), Some(slot)) => {
                    p.stats.from_broker.fetch_add(frame.len() as u64, Ordering::Relaxed);
                    *slot = Seg::Bytes(frame);
                    if learns {
                        // what Python learns from it, in order (it counts the rewrite then)
                        items.push(Item { conn: id, kind: LEARN, t_ns, t_written_ns: t_ns, python: whole,
                                          records: None, reason: String::new(), api: Some(api),
                                          counts: (0, 0), handed: Vec::new(), digest: None });
                    } else if rewritten {
                        *shared.memo_rewrites.lock().unwrap().entry(api.0).or_insert(0) += 1;
                    }
                }
                (_, slot) => {
                    if let Some(Seg::Answer { asked, key }) = slot {
                        *asked = true;
                        *key = whole.get(8..).map(|b| (api.0, api.1, b.to_vec()));
                    }
                    items.push(Item { conn: id, kind: REWRITE, t_ns, t_written_ns: t_ns, python: whole,
                                      records: None, reason: String::new(), api: Some(api), counts: (0, 0),
                                      handed: Vec::new(), digest: None });
                }
            }
        }
        at = end;
    }
    if at < n {
        to.queue.push_back(Seg::Bytes(data[at..].to_vec()));
    }
    to.flush(wholes).map_err(|e| format!("{write_err}: {e}"))
}

/// Python's answer (`frame`) to the answer pair `p` asked it about, put in its place in the
/// client's queue and remembered for a repeat (at Python's `generation` of the brokers it
/// knows: `memo.rs`); false when nothing was asked (the answer is dropped).
pub(super) fn put_answer(p: &mut Pair, frame: Vec<u8>, generation: Option<u64>, memo: &mut Memo) -> bool {
    let slot = p.client.queue.iter_mut().find(|s| matches!(s, Seg::Answer { asked: true, .. }));
    let Some(slot) = slot else { return false };
    if let Seg::Answer { key: Some(key), .. } = std::mem::replace(slot, Seg::Bytes(Vec::new())) {
        memo.remember(key, &frame, generation);
    }
    p.stats.from_broker.fetch_add(frame.len() as u64, Ordering::Relaxed);
    *slot = Seg::Bytes(frame);
    true
}

//! Whether an answer held whole names brokers (KIP-951's `NodeEndpoints`), for a proxy away
//! from its brokers: a Fetch v16+ or Produce v10+ answer carries the new leaders' addresses in a
//! top-level tagged field only where a partition moved (NOT_LEADER_OR_FOLLOWER,
//! FENCED_LEADER_EPOCH). The relay holds such an answer whole and walks it by its layout
//! (`layout.rs`, from the spec) to that tag buffer, records passed over by their length: without
//! the field, or with it empty (Tansu writes it so in every answer), the answer goes on as it
//! came, at once; with a broker in it, or where the walk cannot follow the bytes, Python rewrites
//! it, as the event loop's road rewrites every answer the rewriter wants.

use pyo3::prelude::*;

use crate::cursor::{Cursor, Got, Stop};
use crate::layout::{self, Layouts, Op};
use crate::program::{Met, Place};
use crate::wire::{FETCH, PRODUCE};

/// The layouts of the answers to `api_key` this check reads (Fetch's, Produce's), else None:
/// the answer goes to Python whenever it is held.
pub fn answer_layouts(api_key: i16) -> Option<&'static Layouts> {
    match api_key {
        FETCH => Some(&layout::FETCH),
        PRODUCE => Some(&layout::PRODUCE_ANSWER),
        _ => None,
    }
}

/// Whether the answer `frame` (size prefix and correlation id first) to a request of `api_key`
/// and `version` must go to Python to be rewritten (the relay's rule, for the tests).
#[pyfunction]
#[pyo3(name = "names_brokers")]
pub fn py_names_brokers(frame: &[u8], api_key: i16, version: i16) -> bool {
    match (answer_layouts(api_key), frame.get(8..)) {
        (Some(layouts), Some(body)) => names_brokers(layouts, version, body),
        _ => true,
    }
}

/// Whether `body` (an answer of `version` after its correlation id, whole) must go to Python:
/// its top-level tag buffer holds the message's `NodeEndpoints` tag with an element, or it cannot
/// be walked.
pub fn names_brokers(layouts: &Layouts, version: i16, body: &[u8]) -> bool {
    let Some((from, tag)) = layouts.node_endpoints else { return false };
    if version < from {
        return false;
    }
    let Some((program, flex)) = layouts.program(version) else { return true };
    let mut c = Cursor { b: body, p: 0, unfed: 0 };
    !matches!(walk(program, flex, &mut c).and_then(|()| top_tags_lack(&mut c, tag)), Ok(true))
}

/// The program walked up to its `Rest` (the top-level tag buffer, in an answer; `program.rs`
/// reads every other step), records passed over by their length, tag buffers whole.
fn walk(program: &'static [Op], flex: bool, c: &mut Cursor) -> Got<()> {
    let mut place = Place::new(program, flex);
    loop {
        match place.step(c)? {
            None => continue,
            Some(Met::Rest) => return Ok(()),
            Some(Met::Records) => {
                let n = c.length(flex, true)?;
                if n > 0 {
                    c.skip(usize::try_from(n).map_err(|_| Stop::Bad)?)?;
                }
            }
            Some(Met::Tags) => tags(c, |_, _| ())?,
        }
        place.passed();
    }
}

/// A tag buffer passed over: whether no tag in it is `tag` with an element (an empty or null
/// array names no broker: some brokers write the field at its default, and the rewriter then
/// changes nothing).
fn top_tags_lack(c: &mut Cursor, tag: u64) -> Got<bool> {
    let mut named = false;
    tags(c, |number, value| named |= number == tag && !matches!(value.first(), Some(0 | 1)))?;
    Ok(!named)
}

/// A tag buffer passed over, each tag's number and value shown to `seen`.
fn tags(c: &mut Cursor, mut seen: impl FnMut(u64, &[u8])) -> Got<()> {
    let n = c.tag_count()?;
    for _ in 0..n {
        let number = c.uvarint()?;
        let size = usize::try_from(c.uvarint()?).map_err(|_| Stop::Bad)?;
        seen(number, c.take(size)?);
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests/endpoints.rs"]
mod tests;

//! A Fetch answer's body read by the core, so that its records never cross into Python: the
//! relay (`relay/gather.rs`) digests the body of a Fetch answer read in many pieces as the pieces come
//! (`Digester`), and hands Python the digest instead of the bytes (`protocol/digested.py` reads it).
//!
//! The digest is the body with the bytes of every partition's records taken out (each records
//! field left as an empty one: a length of 0), which the Python road parses with its own codec
//! as it parses any answer, and the figures `walk` gives of each records field taken out (its
//! size first), which Python puts back in their places. Every other byte is the broker's, as it
//! came: fields, tags (a broker's `WaitTimeMs`, `NodeEndpoints`), whatever follows.
//!
//! The layout is the spec's: `layout.rs`'s program for the version (generated from
//! `FetchResponse.json` and `ProduceRequest.json`), after the correlation id, as
//! `protocol/fetch.py`'s `parse_response` reads it. A body this
//! reading cannot follow (a length past the end, an array beyond any real message, a name that
//! is not UTF-8, an offset past an i64) gets no digest (`finish` is None): the relay hands Python
//! an empty skeleton, and the Python road reports the answer as not decoded, as it would the
//! bytes (its reason then names the core, not the byte that is wrong).

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::batches::{batch_bytes, Batches, BATCH_HEADER_BYTES};
use crate::cursor::{varint_at, Cursor, Got, Stop};
use crate::layout::{Op, FETCH, PRODUCE};
use crate::program::{Met, Place};
use crate::values::{i64_bytes, with_range};

/// i64 values per records field in `Digest::stats`: its size, then `walk_batches`' ten figures.
pub const STATS_WIDTH: usize = 11;

#[derive(Default, Debug, PartialEq, Eq)]
pub struct Digest {
    /// a Produce request's size prefix and first bytes (`wire::PEEK_BYTES`), for its header; empty for an answer
    pub head: Vec<u8>,
    pub skeleton: Vec<u8>,
    pub stats: Vec<i64>,
}

/// Up to `left` tags lying whole in `b` from `p`, passed over in one loop: the position after
/// them and the tags still to read. A tag not whole here (or not readable) stops it, for the
/// steps to read (`Digester::tag_step`).
fn whole_tags(b: &[u8], mut p: usize, mut left: u64) -> (usize, u64) {
    while left > 0 {
        let Some((_, q)) = varint_at(b, p) else { break };
        let Some((size, q)) = varint_at(b, q) else { break };
        let Some(end) = usize::try_from(size).ok().and_then(|n| q.checked_add(n)).filter(|&e| e <= b.len()) else {
            break;
        };
        p = end;
        left -= 1;
    }
    (p, left)
}

/// What of a tag was read (`Digester::tag_step`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TagRead {
    Nothing,
    Number,
    Size(usize),
}

/// The most a digest's skeleton may hold (the body less its records): an answer's fields and
/// tags for some hundred thousand partitions. A body whose skeleton would be bigger is not
/// followed (`finish` is None): the Python road reports it as not decoded, and the core keeps
/// none of its bytes from then on.
pub const SKELETON_MAX: usize = 4 << 20;

/// `walk` of one records field whose bytes arrive in pieces: the same rules, batch by batch,
/// a batch's 61-byte header gathered where it lies across two pieces.
struct Walk {
    size: usize,
    /// bytes of the field still to come
    left: usize,
    header: [u8; BATCH_HEADER_BYTES],
    have: usize,
    /// bytes of the current batch past its header still to pass over
    skip: usize,
    stopped: bool,
    s: Batches,
}

impl Walk {
    fn new(size: usize) -> Self {
        Walk { size, left: size, header: [0; BATCH_HEADER_BYTES], have: 0, skip: 0, stopped: false, s: Batches::new() }
    }

    /// The header of a batch that began with `remaining` bytes of the field left.
    fn batch(&mut self, h: &[u8], remaining: usize) {
        if h[16] != 2 {
            self.s.legacy = true;
            self.stopped = true;
            return;
        }
        match batch_bytes(h) {
            Some(total) if total <= remaining => {
                self.s.add(h);
                self.skip = total - BATCH_HEADER_BYTES;
            }
            _ => {
                self.s.partial_bytes += remaining as i64; // the broker cut the last batch short
                self.stopped = true;
            }
        }
    }

    /// Takes what of `d` is this field's: the count taken.
    fn feed(&mut self, d: &[u8]) -> usize {
        let take = d.len().min(self.left);
        let mut d = &d[..take];
        while !d.is_empty() {
            if self.stopped {
                self.left -= d.len();
                break;
            }
            if self.skip > 0 {
                let k = self.skip.min(d.len());
                self.skip -= k;
                self.left -= k;
                d = &d[k..];
                continue;
            }
            if self.have == 0 {
                if self.left < BATCH_HEADER_BYTES {
                    self.s.partial_bytes += self.left as i64;
                    self.stopped = true;
                    continue;
                }
                if d.len() >= BATCH_HEADER_BYTES {
                    let remaining = self.left;
                    self.left -= BATCH_HEADER_BYTES;
                    let (h, rest) = d.split_at(BATCH_HEADER_BYTES);
                    d = rest;
                    self.batch(h, remaining);
                    continue;
                }
            }
            let k = (BATCH_HEADER_BYTES - self.have).min(d.len());
            self.header[self.have..self.have + k].copy_from_slice(&d[..k]);
            self.have += k;
            self.left -= k;
            d = &d[k..];
            if self.have == BATCH_HEADER_BYTES {
                self.have = 0;
                let h = self.header;
                self.batch(&h, self.left + BATCH_HEADER_BYTES);
            }
        }
        take
    }

    /// The figures `Digest::stats` holds of the field, or None where an offset is past an i64.
    fn figures(&self) -> Option<[i64; STATS_WIDTH]> {
        let s = &self.s;
        Some([i64::try_from(self.size).ok()?, s.batches, s.records, s.first_offset, s.first_timestamp_ms,
              i64::try_from(s.next_offset).ok()?, s.max_timestamp_ms, s.log_append_time as i64, s.control_batches,
              s.partial_bytes, s.legacy as i64])
    }
}

/// A Fetch answer's digest (or a Produce request's) made as its body arrives, piece by piece
/// (`feed`): the relay's road for one read in many pieces, whose records are walked where they
/// were read and never copied. The skeleton is read on after each piece from the last element
/// read, never from further back (`Cursor`); a records field's bytes go to its `Walk` instead.
/// So its cost is linear in the body's size however the body is cut: the same bytes fed whole,
/// in 64 KiB reads or a byte at a time cost about the same per byte. A body it cannot follow
/// (`Stop::Bad`) ends the digest at once: its bytes from then on are passed over, not kept, and
/// `finish` says so (None).
pub struct Digester {
    /// where it stands in the steps of this message's version (`program.rs`; `layout.rs`, from
    /// Kafka's JSON spec)
    place: Place,
    skeleton: Vec<u8>,
    /// the skeleton's bytes read so far
    pos: usize,
    /// the tags still to read of the tag buffer under way (None: its count not read yet), and
    /// what of the one under way was read: nothing, its number, or its number and its size
    tags_left: Option<u64>,
    tag_read: TagRead,
    walk: Option<Walk>,
    stats: Vec<i64>,
    followed: bool,
    /// the body's bytes not fed yet
    unfed: usize,
    /// the skeleton's bytes read so far, counted again where a piece ended inside an element:
    /// the tests hold it to about the body's size however the body is cut
    examined: usize,
}

impl Digester {
    /// A Fetch answer's body of `size` bytes (after its correlation id: `FetchResponse.json`,
    /// its header's tags first in flexible versions, as `protocol/fetch.py`'s `parse_response`
    /// reads it); None for a version the spec has not.
    pub fn new(version: i16, size: usize) -> Option<Self> {
        FETCH.program(version).map(|(program, flex)| Self::made(program, flex, size))
    }

    /// A Produce request's body of `size` bytes (after its header: `ProduceRequest.json`, as
    /// `protocol/produce.py`'s `parse_request` reads it); None for a version the spec has not.
    pub fn produce(version: i16, size: usize) -> Option<Self> {
        PRODUCE.program(version).map(|(program, flex)| Self::made(program, flex, size))
    }

    fn made(program: &'static [Op], flex: bool, size: usize) -> Self {
        Digester { place: Place::new(program, flex), skeleton: Vec::with_capacity(256), pos: 0,
                   tags_left: None, tag_read: TagRead::Nothing, walk: None, stats: Vec::new(), followed: true,
                   unfed: size, examined: 0 }
    }

    /// The bytes it keeps now (the skeleton so far).
    pub fn held(&self) -> usize {
        self.skeleton.len()
    }

    /// The body could not be followed: what it kept goes, and the rest of the body is passed over.
    fn refuse(&mut self) {
        self.followed = false;
        self.walk = None;
        self.skeleton = Vec::new();
        self.stats = Vec::new();
        self.pos = 0;
    }

    /// The next bytes of the body (more than its size said: not followed).
    pub fn feed(&mut self, mut d: &[u8]) {
        if d.len() > self.unfed {
            self.refuse();
        }
        self.unfed = self.unfed.saturating_sub(d.len());
        while !d.is_empty() && self.followed {
            if let Some(w) = self.walk.as_mut() {
                let k = w.feed(d);
                d = &d[k..];
                if w.left > 0 {
                    return;
                }
                self.field_walked();
                continue;
            }
            self.skeleton.extend_from_slice(d);
            self.read_on();
            if self.skeleton.len() > SKELETON_MAX {
                self.refuse();
            }
            return;
        }
    }

    /// The digest, once the body's last byte was fed; None where the body could not be followed.
    pub fn finish(mut self) -> Option<Digest> {
        if self.followed {
            self.read_on(); // a records field that ended the last piece leaves the rest unread
        }
        (self.followed && self.walk.is_none() && self.at_rest() && self.unfed == 0)
            .then_some(Digest { head: Vec::new(), skeleton: self.skeleton, stats: self.stats })
    }

    fn field_walked(&mut self) {
        if let Some(w) = self.walk.take() {
            match w.figures() {
                Some(f) => self.stats.extend_from_slice(&f),
                None => return self.refuse(),
            }
        }
        self.place.passed();
    }

    /// Every step read: what is left is the rest, kept as it came.
    fn at_rest(&self) -> bool {
        self.place.at_rest()
    }

    /// One step of a tag buffer (its count, a tag's number, its size, its bytes): true when the
    /// buffer is read. Nothing changes unless the step's bytes are all here.
    fn tag_step(&mut self, c: &mut Cursor) -> Got<bool> {
        let Some(left) = self.tags_left else {
            let n = c.tag_count()?;
            self.tags_left = (n > 0).then_some(n);
            return Ok(n == 0);
        };
        match self.tag_read {
            TagRead::Nothing => {
                // the tags whole here, at once (one step for all of them); then one's number
                let (p, rest) = whole_tags(c.b, c.p, left);
                if rest != left {
                    c.p = p;
                    self.tags_left = (rest > 0).then_some(rest);
                    return Ok(rest == 0);
                }
                c.uvarint()?;
                self.tag_read = TagRead::Number;
            }
            TagRead::Number => {
                let size = usize::try_from(c.uvarint()?).map_err(|_| Stop::Bad)?;
                self.tag_read = TagRead::Size(size);
            }
            TagRead::Size(size) => {
                c.skip(size)?;
                self.tag_read = TagRead::Nothing;
                self.tags_left = (left > 1).then_some(left - 1);
                return Ok(left == 1);
            }
        }
        Ok(false)
    }

    /// Reads the skeleton on from `pos` as far as its bytes go, an element at a time; the bytes
    /// of a records field met are taken out of it for the field's `Walk` (and what follows the
    /// field put back).
    fn read_on(&mut self) {
        while self.followed && self.walk.is_none() && !self.at_rest() {
            let skeleton = std::mem::take(&mut self.skeleton);
            let mut c = Cursor { b: &skeleton, p: self.pos, unfed: self.unfed };
            let got = self.step(&mut c);
            let p = c.p;
            self.examined += p - self.pos;
            self.skeleton = skeleton;
            match got {
                Ok(None) => self.pos = p,
                Ok(Some((at, start, size))) => self.records(at, start, size),
                Err(Stop::More) => return, // its bytes are not all here yet
                Err(Stop::Bad) => return self.refuse(),
            }
        }
    }

    /// A records field of `size` bytes whose length begins at `at` of the skeleton and its bytes
    /// at `start`: those read so far leave the skeleton for its walk (the field left as an empty
    /// one), and what follows the field, if it is here, is put back.
    fn records(&mut self, at: usize, start: usize, size: usize) {
        let tail = self.skeleton.split_off(start);
        self.skeleton.truncate(at);
        if self.place.flex {
            self.skeleton.push(1); // a compact length of 0 ...
        } else {
            self.skeleton.extend_from_slice(&0i32.to_be_bytes()); // ... or an INT32 one
        }
        self.pos = self.skeleton.len();
        let mut walk = Walk::new(size);
        let k = walk.feed(&tail);
        let more = walk.left > 0;
        self.walk = Some(walk);
        if more {
            return; // the field goes on in the next pieces
        }
        self.field_walked();
        self.skeleton.extend_from_slice(&tail[k..]);
    }

    /// One step read from `c`, the program moved on; for a records field, where it lies
    /// (`records`' arguments) instead of its being read.
    fn step(&mut self, c: &mut Cursor) -> Got<Option<(usize, usize, usize)>> {
        match self.place.step(c)? {
            None | Some(Met::Rest) => {}
            Some(Met::Records) => {
                let at = c.p;
                let n = c.length(self.place.flex, true)?;
                if n >= 0 {
                    let size = usize::try_from(n).map_err(|_| Stop::Bad)?;
                    if size > c.left() {
                        return Err(Stop::Bad); // a records field past the end of the body
                    }
                    return Ok(Some((at, c.p, size))); // field_walked moves the program on
                }
                self.place.passed(); // a null records field
            }
            Some(Met::Tags) => {
                if self.tag_step(c)? {
                    self.place.passed();
                } // else the buffer goes on
            }
        }
        Ok(None)
    }
}

/// `digest.rs`'s digest of `body` (a Fetch answer of `version` after its correlation id), fed in
/// the pieces `cuts` (offsets into it, ascending) cut it into, as `(skeleton, stats)` (`stats`:
/// native-endian i64s, `DIGEST_STATS_WIDTH` per records field), or None where the codec must
/// read the bytes itself: what the relay hands Python of a Fetch answer read in pieces (with
/// `produce`, of a Produce request's body after its header).
#[pyfunction]
#[pyo3(signature = (body, version, cuts=Vec::new(), produce=false))]
pub fn digest_fetch<'py>(py: Python<'py>, body: &Bound<'_, PyAny>, version: i16, cuts: Vec<usize>, produce: bool)
                     -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let n = PyBuffer::<u8>::get(body)?.len_bytes();
    let got = with_range(body, 0, n, |b| {
        let size = b.len();
        let mut d = if produce { Digester::produce(version, size)? } else { Digester::new(version, size)? };
        let mut at = 0;
        for cut in cuts.iter().copied().chain([b.len()]) {
            let cut = cut.clamp(at, b.len());
            d.feed(&b[at..cut]);
            at = cut;
        }
        d.finish()
    })?;
    Ok(got.map(|d| (PyBytes::new(py, &d.skeleton), i64_bytes(py, &d.stats))))
}

#[cfg(test)]
#[path = "tests/digest.rs"]
mod tests;

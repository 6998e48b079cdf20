//! A Fetch answer's body read by the core, so that its records never cross into Python: the
//! relay (`relay.rs`) digests the body of a Fetch answer read in many pieces as the pieces come
//! (`Digester`), and hands Python the digest instead of the bytes (`protocol/digested.py` reads it).
//!
//! The digest is the body with the bytes of every partition's records taken out (each records
//! field left as an empty one: a length of 0), which the Python road parses with its own codec
//! as it parses any answer, and the figures `walk` gives of each records field taken out (its
//! size first), which Python puts back in their places. Every other byte is the broker's, as it
//! came: fields, tags (a broker's `WaitTimeMs`, `NodeEndpoints`), whatever follows.
//!
//! The layout is `FetchResponse.json`'s, versions 4 to 18 (flexible from 12; topics by id from
//! 13), after the correlation id, as `protocol/fetch.py`'s `parse_response` reads it. A body this
//! reading cannot follow (a length past the end, an array beyond any real message, a name that
//! is not UTF-8, an offset past an i64) gets no digest (`finish` is None): the relay hands Python
//! an empty skeleton, and the Python road reports the answer as not decoded, as it would the
//! bytes (its reason then names the core, not the byte that is wrong).

use crate::{batch_bytes, Batches, BATCH_HEADER_BYTES};

/// i64 values per records field in `Digest::stats`: its size, then `walk_batches`' ten figures.
pub const STATS_WIDTH: usize = 11;
/// `stream.MAX_ARRAY`: an array longer than this is corrupt.
const MAX_ARRAY: i64 = 1 << 24;

#[derive(Default)]
pub struct Digest {
    /// a Produce request's size prefix and first bytes (`wire::PEEK_BYTES`), for its header; empty for an answer
    pub head: Vec<u8>,
    pub skeleton: Vec<u8>,
    pub stats: Vec<i64>,
}

struct Cursor<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.p..self.p.checked_add(n)?)?;
        self.p += n;
        Some(s)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    /// `primitives.read_uvarint`: at most 10 bytes.
    fn uvarint(&mut self) -> Option<u64> {
        let mut value: u64 = 0;
        let mut shift = 0u32;
        loop {
            let byte = *self.b.get(self.p)?;
            self.p += 1;
            value |= ((byte & 0x7f) as u64).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(value);
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }

    /// `stream.length`: a compact length (the varint less one) or an INT32 (an INT16 for strings).
    fn length(&mut self, flexible: bool, wide: bool) -> Option<i64> {
        if flexible {
            Some(i64::try_from(self.uvarint()?).ok()? - 1)
        } else if wide {
            Some(self.i32()? as i64)
        } else {
            Some(self.i16()? as i64)
        }
    }

    fn array_len(&mut self, flexible: bool) -> Option<i64> {
        self.length(flexible, true).filter(|&n| n <= MAX_ARRAY)
    }

    /// A string passed over (it must be UTF-8, as the codec decodes it).
    fn string(&mut self, flexible: bool) -> Option<()> {
        let n = self.length(flexible, false)?;
        if n >= 0 {
            std::str::from_utf8(self.take(usize::try_from(n).ok()?)?).ok()?;
        }
        Some(())
    }

    /// A tag buffer passed over.
    fn tags(&mut self) -> Option<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(usize::try_from(size).ok()?)?;
        }
        Some(())
    }
}

/// Where the reading of the skeleton stands: the next part of the answer to read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    Head,
    Topic,
    Partition,
    PartitionTags,
    TopicTags,
    /// every topic read: the rest (the top-level tags) is the skeleton's as it came
    Rest,
}

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
/// were read and never copied. The skeleton so far is read as far as it goes after each piece; a records
/// field's bytes go to its `Walk` instead. A body it cannot follow leaves the rest of the bytes
/// in the skeleton, and `finish` says so (None).
pub struct Digester {
    /// a Produce request's body (after its header), not a Fetch answer's
    produce: bool,
    version: i16,
    flex: bool,
    skeleton: Vec<u8>,
    /// the skeleton's bytes read so far
    pos: usize,
    stage: Stage,
    topics_left: i64,
    partitions_left: i64,
    walk: Option<Walk>,
    stats: Vec<i64>,
    followed: bool,
}

impl Digester {
    /// A Fetch answer's (after its correlation id); None for a version the codec does not read.
    pub fn new(version: i16) -> Option<Self> {
        (4..=18).contains(&version).then(|| Self::made(false, version, version >= 12))
    }

    /// A Produce request's body (after its header: `ProduceRequest.json`, versions 3 to 13,
    /// flexible from 9, topics by id from 13, as `protocol/produce.py`'s `parse_request` reads
    /// it); None for a version the codec does not read.
    pub fn produce(version: i16) -> Option<Self> {
        (3..=13).contains(&version).then(|| Self::made(true, version, version >= 9))
    }

    fn made(produce: bool, version: i16, flex: bool) -> Self {
        Digester { produce, version, flex, skeleton: Vec::with_capacity(256), pos: 0, stage: Stage::Head,
                   topics_left: 0, partitions_left: 0, walk: None, stats: Vec::new(), followed: true }
    }

    /// The next bytes of the body.
    pub fn feed(&mut self, mut d: &[u8]) {
        while !d.is_empty() {
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
            return;
        }
    }

    /// The digest, once the body's last byte was fed; None where the body could not be followed.
    pub fn finish(mut self) -> Option<Digest> {
        self.read_on(); // a records field that ended the last piece leaves the rest unread
        (self.followed && self.walk.is_none() && self.stage == Stage::Rest)
            .then_some(Digest { head: Vec::new(), skeleton: self.skeleton, stats: self.stats })
    }

    fn field_walked(&mut self) {
        if let Some(w) = self.walk.take() {
            match w.figures() {
                Some(f) => self.stats.extend_from_slice(&f),
                None => self.followed = false,
            }
        }
        self.stage = Stage::PartitionTags;
    }

    /// Reads the skeleton on from `pos` as far as its bytes go; the bytes of a records field met
    /// are taken out of it for the field's `Walk` (and what follows the field put back).
    fn read_on(&mut self) {
        let (flex, version, produce) = (self.flex, self.version, self.produce);
        loop {
            let mut c = Cursor { b: &self.skeleton, p: self.pos };
            let stage = self.stage;
            let next = match stage {
                Stage::Head => (|| {
                    if produce {
                        c.string(flex)?; // TransactionalId
                        c.skip(2 + 4)?; // Acks, TimeoutMs
                    } else {
                        if flex {
                            c.tags()?; // the response header's
                        }
                        c.skip(4)?; // ThrottleTimeMs
                        if version >= 7 {
                            c.skip(2 + 4)?; // ErrorCode, SessionId
                        }
                    }
                    Some(c.array_len(flex)?.max(0))
                })().map(|n| {
                    self.topics_left = n;
                    if n > 0 { Stage::Topic } else { Stage::Rest }
                }),
                Stage::Topic => (|| {
                    if version >= 13 {
                        c.skip(16)?; // TopicId
                    } else {
                        c.string(flex)?;
                    }
                    c.array_len(flex).map(|n| n.max(0))
                })().map(|n| {
                    self.partitions_left = n;
                    if n > 0 { Stage::Partition } else { Stage::TopicTags }
                }),
                Stage::Partition => {
                    let Some((at, n)) = (|| {
                        if produce {
                            c.skip(4)?; // Index
                            let at = c.p;
                            return Some((at, c.length(flex, true)?));
                        }
                        c.skip(4 + 2 + 8 + 8)?; // PartitionIndex, ErrorCode, HighWatermark, LastStableOffset
                        if version >= 5 {
                            c.skip(8)?; // LogStartOffset
                        }
                        for _ in 0..c.array_len(flex)?.max(0) {
                            c.skip(16)?; // AbortedTransactions: ProducerId, FirstOffset
                            if flex {
                                c.tags()?;
                            }
                        }
                        if version >= 11 {
                            c.skip(4)?; // PreferredReadReplica
                        }
                        let at = c.p;
                        Some((at, c.length(flex, true)?))
                    })() else { return };
                    if n < 0 {
                        self.pos = c.p;
                        self.stage = Stage::PartitionTags;
                        continue;
                    }
                    let Ok(size) = usize::try_from(n) else { return };
                    // the field's bytes read so far leave the skeleton for its walk; an empty field stays
                    let start = c.p;
                    let mut walk = Walk::new(size);
                    let tail = self.skeleton.split_off(start);
                    self.skeleton.truncate(at);
                    self.skeleton.push(1); // a compact length of 0 ...
                    if !flex {
                        self.skeleton.pop();
                        self.skeleton.extend_from_slice(&0i32.to_be_bytes()); // ... or an INT32 one
                    }
                    self.pos = self.skeleton.len();
                    let k = walk.feed(&tail);
                    self.walk = Some(walk);
                    if self.walk.as_ref().is_some_and(|w| w.left > 0) {
                        return; // the field goes on in the next pieces
                    }
                    self.field_walked();
                    self.skeleton.extend_from_slice(&tail[k..]);
                    continue;
                }
                Stage::PartitionTags => (if flex { c.tags() } else { Some(()) }).map(|_| {
                    self.partitions_left -= 1;
                    if self.partitions_left > 0 { Stage::Partition } else { Stage::TopicTags }
                }),
                Stage::TopicTags => (if flex { c.tags() } else { Some(()) }).map(|_| {
                    self.topics_left -= 1;
                    if self.topics_left > 0 { Stage::Topic } else { Stage::Rest }
                }),
                Stage::Rest => return,
            };
            match next {
                Some(stage) => {
                    self.pos = c.p;
                    self.stage = stage;
                }
                None => return, // its bytes are not all here yet (or never will be: `finish` says)
            }
        }
    }
}

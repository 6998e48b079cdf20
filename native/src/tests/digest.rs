//! The digest against the walk of whole records and against itself cut anywhere: the same
//! digest whatever the pieces, the same figures as `walk`, and a cost linear in the body's size
//! (`Digester::examined`) for every layout it reads, hostile counts included.

use proptest::prelude::*;

use super::*;
use crate::cursor::MAX_TAGS;
use crate::batches::walk;

/// The most bytes of one element (a partition's fields, a tag's header) read again when a piece
/// ends inside it: every piece costs at most this over the bytes it brings.
const ELEMENT_MAX: usize = 64;

/// A compact (flexible) length or count: the varint of n + 1.
fn uvarint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn length(out: &mut Vec<u8>, n: usize, flex: bool) {
    if flex {
        uvarint(out, n as u64 + 1);
    } else {
        out.extend_from_slice(&(n as i32).to_be_bytes());
    }
}

/// A record batch (magic 2) of `count` records and `size` bytes in all (at least a header's).
fn batch(base: i64, count: i32, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size.max(BATCH_HEADER_BYTES)];
    b[0..8].copy_from_slice(&base.to_be_bytes());
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[16] = 2;
    b[23..27].copy_from_slice(&(count - 1).to_be_bytes());
    b[27..35].copy_from_slice(&1_700_000_000_000i64.to_be_bytes());
    b[35..43].copy_from_slice(&(1_700_000_000_000i64 + base).to_be_bytes());
    b[57..61].copy_from_slice(&count.to_be_bytes());
    b
}

/// A tag buffer of these tags' sizes.
fn tags(out: &mut Vec<u8>, sizes: &[usize]) {
    uvarint(out, sizes.len() as u64);
    for (i, &n) in sizes.iter().enumerate() {
        uvarint(out, i as u64);
        uvarint(out, n as u64);
        out.extend(std::iter::repeat_n(0xab, n));
    }
}

#[derive(Clone, Debug)]
struct Partition {
    aborted: usize,
    records: Vec<u8>,
    tags: Vec<usize>,
}

/// A Fetch answer's body (after the correlation id) of `version`: the records blobs in order.
fn fetch(version: i16, header_tags: &[usize], topics: &[Vec<Partition>], tail: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let flex = version >= 12;
    let mut b = Vec::new();
    let mut blobs = Vec::new();
    if flex {
        tags(&mut b, header_tags);
    }
    b.extend_from_slice(&7i32.to_be_bytes());
    if version >= 7 {
        b.extend_from_slice(&[0, 0, 0, 0, 0, 1]);
    }
    length(&mut b, topics.len(), flex);
    for (t, parts) in topics.iter().enumerate() {
        if version >= 13 {
            b.extend_from_slice(&[t as u8; 16]);
        } else {
            let name = format!("topic-{t}");
            if flex {
                uvarint(&mut b, name.len() as u64 + 1);
            } else {
                b.extend_from_slice(&(name.len() as i16).to_be_bytes());
            }
            b.extend_from_slice(name.as_bytes());
        }
        length(&mut b, parts.len(), flex);
        for (i, p) in parts.iter().enumerate() {
            b.extend_from_slice(&(i as i32).to_be_bytes());
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&100i64.to_be_bytes());
            b.extend_from_slice(&90i64.to_be_bytes());
            if version >= 5 {
                b.extend_from_slice(&0i64.to_be_bytes());
            }
            length(&mut b, p.aborted, flex);
            for a in 0..p.aborted {
                b.extend_from_slice(&(a as i64).to_be_bytes());
                b.extend_from_slice(&(a as i64 * 10).to_be_bytes());
                if flex {
                    tags(&mut b, &[]);
                }
            }
            if version >= 11 {
                b.extend_from_slice(&(-1i32).to_be_bytes());
            }
            length(&mut b, p.records.len(), flex);
            b.extend_from_slice(&p.records);
            blobs.push(p.records.clone());
            if flex {
                tags(&mut b, &p.tags);
            }
        }
        if flex {
            tags(&mut b, &[1]);
        }
    }
    if flex {
        tags(&mut b, tail);
    }
    (b, blobs)
}

/// The digest of `body` fed in pieces of `step` bytes, and what it examined.
fn digest_in(version: i16, produce: bool, body: &[u8], step: usize) -> (Option<Digest>, usize) {
    let mut d = if produce { Digester::produce(version, body.len()) } else { Digester::new(version, body.len()) }
        .expect("a version the codec reads");
    for piece in body.chunks(step.max(1)) {
        d.feed(piece);
    }
    let examined = d.examined;
    (d.finish(), examined)
}

fn digest_cut(version: i16, body: &[u8], cuts: &[usize]) -> Option<Digest> {
    let mut d = Digester::new(version, body.len()).unwrap();
    let mut at = 0;
    for &cut in cuts.iter().chain([body.len()].iter()) {
        let cut = cut.clamp(at, body.len());
        d.feed(&body[at..cut]);
        at = cut;
    }
    d.finish()
}

/// The figures `walk` gives of a whole records blob, as the digest's stats hold them.
fn figures(blob: &[u8]) -> Vec<i64> {
    let s = walk(blob);
    vec![blob.len() as i64, s.batches, s.records, s.first_offset, s.first_timestamp_ms, s.next_offset as i64,
         s.max_timestamp_ms, s.log_append_time as i64, s.control_batches, s.partial_bytes, s.legacy as i64]
}

fn sample(version: i16) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut records = batch(0, 3, 200);
    records.extend(batch(3, 1, 61));
    records.extend(batch(4, 5, 70_000));
    records.extend_from_slice(&batch(9, 2, 500)[..100]); // cut short by the broker
    let parts = vec![Partition { aborted: 2, records: records.clone(), tags: vec![3] },
                     Partition { aborted: 0, records: Vec::new(), tags: vec![] }];
    fetch(version, &[5, 0], &[parts, vec![Partition { aborted: 1, records, tags: vec![] }]], &[2])
}

#[test]
fn the_same_digest_whole_in_64k_reads_and_byte_by_byte() {
    for version in 4..=18 {
        let (body, blobs) = sample(version);
        let (whole, _) = digest_in(version, false, &body, body.len());
        let whole = whole.unwrap_or_else(|| panic!("v{version}: the sample is followed"));
        let want: Vec<i64> = blobs.iter().flat_map(|b| figures(b)).collect();
        assert_eq!(whole.stats, want, "v{version}");
        for step in [1, 7, 61, 64 << 10] {
            assert_eq!(digest_in(version, false, &body, step).0.as_ref(), Some(&whole), "v{version} in {step}-byte reads");
        }
    }
}

/// A Produce request's body (after its header) of `version`: one topic of two partitions.
fn produce(version: i16, records: &[u8]) -> Vec<u8> {
    let flex = version >= 9;
    let mut b = Vec::new();
    if flex {
        b.push(0); // a null TransactionalId
    } else {
        b.extend_from_slice(&(-1i16).to_be_bytes());
    }
    b.extend_from_slice(&[0, 1, 0, 0, 0x75, 0x30]); // Acks, TimeoutMs
    length(&mut b, 1, flex);
    if version >= 13 {
        b.extend_from_slice(&[7; 16]);
    } else if flex {
        b.extend_from_slice(&[2, b't']);
    } else {
        b.extend_from_slice(&[0, 1, b't']);
    }
    length(&mut b, 2, flex);
    for i in 0..2i32 {
        b.extend_from_slice(&i.to_be_bytes());
        length(&mut b, records.len(), flex);
        b.extend_from_slice(records);
        if flex {
            tags(&mut b, &[]);
        }
    }
    if flex {
        tags(&mut b, &[]); // the topic's
        tags(&mut b, &[4]); // the request's: the rest, as it came
    }
    b
}

#[test]
fn every_produce_version_is_digested_whole_and_cut() {
    let records = [batch(0, 3, 200), batch(3, 2, 90)].concat();
    for version in 3..=13 {
        let body = produce(version, &records);
        let (whole, _) = digest_in(version, true, &body, body.len());
        let whole = whole.unwrap_or_else(|| panic!("v{version}: followed"));
        assert_eq!(whole.stats, [figures(&records), figures(&records)].concat(), "v{version}");
        for step in [1, 5, 64] {
            assert_eq!(digest_in(version, true, &body, step).0.as_ref(), Some(&whole), "v{version} in {step}-byte reads");
        }
    }
    assert!(Digester::produce(2, 10).is_none() && Digester::produce(14, 10).is_none(), "outside the spec's versions");
    assert!(Digester::new(3, 10).is_none() && Digester::new(19, 10).is_none(), "outside the spec's versions");
}

/// The programs generated from the specs are well formed: each ends with the rest, each array's
/// end is an End, and an element's least size is what its steps need at the least.
#[test]
fn the_generated_programs_are_well_formed() {
    use crate::layout::{Op, FETCH, PRODUCE};
    for (layouts, versions) in [(&FETCH, 4..=18), (&PRODUCE, 3..=13)] {
        assert_eq!(layouts.programs.len(), versions.clone().count());
        for v in versions {
            let (program, flex) = layouts.program(v).unwrap();
            assert_eq!(program.last(), Some(&Op::Rest), "v{v}");
            assert_eq!(program.iter().filter(|op| **op == Op::Rest).count(), 1, "v{v}");
            assert_eq!(program.iter().filter(|op| **op == Op::Records).count(), 1, "v{v}");
            for (i, op) in program.iter().enumerate() {
                if let Op::Array { end, least } = *op {
                    assert!(end > i && program[end] == Op::End, "v{v}: the array at {i}");
                    assert!(least >= if flex { 2 } else { 4 }, "v{v}: the array at {i}");
                }
            }
        }
    }
}

#[test]
fn the_skeleton_is_the_body_without_its_records() {
    let (body, blobs) = sample(12);
    let d = digest_in(12, false, &body, 4096).0.unwrap();
    let taken: usize = blobs.iter().map(|b| b.len() + if b.is_empty() { 0 } else { length_bytes(b.len()) - 1 }).sum();
    assert_eq!(d.skeleton.len(), body.len() - taken);
}

fn length_bytes(n: usize) -> usize {
    let mut v = Vec::new();
    uvarint(&mut v, n as u64 + 1);
    v.len()
}

#[test]
fn a_body_cut_short_or_too_long_is_not_followed() {
    let (body, _) = sample(12);
    let mut d = Digester::new(12, body.len() + 1).unwrap();
    d.feed(&body);
    assert!(d.finish().is_none(), "a byte still owed");
    let mut d = Digester::new(12, body.len() - 1).unwrap();
    d.feed(&body);
    assert!(d.finish().is_none(), "a byte more than the size said");
}

/// Every hostile count: ended at once, as not decoded, having examined a few bytes.
#[test]
fn a_count_that_cannot_fit_ends_the_digest_at_once() {
    let huge = u32::MAX as u64;
    let mut cases: Vec<(&str, i16, bool, Vec<u8>)> = Vec::new();
    let mut b = Vec::new();
    uvarint(&mut b, huge); // header tags
    b.resize(8 << 20, 0);
    cases.push(("header tags", 12, false, b));
    let (body, _) = fetch(12, &[], &[vec![Partition { aborted: 0, records: Vec::new(), tags: vec![] }]], &[]);
    // the partition's tags claim 2^32-1 (replace its empty tag buffer: the byte before the topic's tags)
    let mut b = body.clone();
    let at = b.len() - 1 /* top tags */ - 3 /* topic tags: count 1, tag 0, size 1 */ - 1 /* its byte */ - 1;
    b.splice(at..at + 1, { let mut v = Vec::new(); uvarint(&mut v, huge); v });
    b.resize(b.len() + (8 << 20), 0);
    cases.push(("partition tags", 12, false, b));
    let mut b = vec![0u8; 1 + 4 + 2 + 4]; // no header tags, then the fields
    uvarint(&mut b, huge); // topics
    b.resize(8 << 20, 0);
    cases.push(("topics", 12, false, b));
    let mut b = vec![0u8; 4 + 2 + 4];
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[0, 1, b'x']);
    b.extend_from_slice(&i32::MAX.to_be_bytes()); // partitions
    b.resize(8 << 20, 0);
    cases.push(("partitions", 7, false, b));
    let mut b = vec![0u8; 4 + 2 + 4];
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[0, 1, b'x']);
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[0u8; 4 + 2 + 8 + 8 + 8]);
    b.extend_from_slice(&(1i32 << 24).to_be_bytes()); // aborted transactions
    b.resize(8 << 20, 0);
    cases.push(("aborted transactions", 7, false, b));
    let mut b = vec![0u8; 4 + 2 + 4];
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[0, 1, b'x']);
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[0u8; 4 + 2 + 8 + 8 + 8]);
    b.extend_from_slice(&0i32.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&(i32::MAX).to_be_bytes()); // records past the end
    b.resize(8 << 20, 0);
    cases.push(("records", 11, false, b));
    let mut b = vec![1u8]; // a Produce v9: no transactional id, acks, timeout
    b.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    b.push(2); // one topic
    b.extend_from_slice(&[2, b't']);
    b.push(2); // one partition
    b.extend_from_slice(&0i32.to_be_bytes());
    b.push(1); // empty records
    uvarint(&mut b, huge); // its tags
    b.resize(8 << 20, 0);
    cases.push(("produce partition tags", 9, true, b));
    for (what, version, produce, body) in cases {
        for step in [1, 64 << 10, body.len()] {
            let (d, examined) = digest_in(version, produce, &body, step);
            assert!(d.is_none(), "{what}: not followed");
            assert!(examined < 4096, "{what} in {step}-byte reads: {examined} bytes examined");
        }
    }
}

/// A count that fits its body, walked an element at a time: the cost per byte is the same
/// whole, in 64 KiB reads and byte by byte.
#[test]
fn the_cost_is_linear_however_the_body_is_cut() {
    let mut bodies: Vec<(&str, i16, Vec<u8>)> = Vec::new();
    let many: Vec<usize> = vec![100; MAX_TAGS as usize]; // the most tags a buffer may hold, 100 bytes each
    bodies.push(("header tags", 12, fetch(12, &many, &[], &[]).0));
    let (b, _) = fetch(12, &[], &[vec![Partition { aborted: 1 << 16, records: Vec::new(), tags: many.clone() }]], &[]);
    bodies.push(("aborted transactions and partition tags", 12, b));
    let parts: Vec<Partition> = (0..20_000).map(|_| Partition { aborted: 0, records: batch(0, 1, 61), tags: vec![] })
        .collect();
    bodies.push(("partitions", 16, fetch(16, &[], &[parts], &[]).0));
    let mut records = Vec::new();
    for i in 0..20_000 {
        records.extend(batch(i, 1, 100));
    }
    bodies.push(("batches", 12, fetch(12, &[], &[vec![Partition { aborted: 0, records, tags: vec![1 << 20] }]], &[]).0));
    for (what, version, body) in bodies {
        let (whole, base) = digest_in(version, false, &body, body.len());
        assert!(whole.is_some(), "{what}: followed ({} bytes)", body.len());
        assert!(base <= body.len(), "{what}: {base} bytes examined of {}", body.len());
        for step in [1, 64 << 10] {
            let (d, examined) = digest_in(version, false, &body, step);
            assert_eq!(d, whole, "{what} in {step}-byte reads");
            assert!(examined <= base + body.len().div_ceil(step) * ELEMENT_MAX,
                    "{what} in {step}-byte reads: {examined} bytes examined, {base} whole");
            assert!(examined <= base * 3, "{what} in {step}-byte reads: {examined} bytes examined, {base} whole");
        }
    }
}

fn partition() -> impl Strategy<Value = Partition> {
    let batches = prop::collection::vec((1i32..5, 61usize..400), 0..4);
    (0usize..3, batches, 0usize..80, prop::collection::vec(0usize..20, 0..3)).prop_map(|(aborted, bs, cut, tags)| {
        let mut records = Vec::new();
        let mut base = 0;
        for (count, size) in bs {
            records.extend(batch(base, count, size));
            base += count as i64;
        }
        records.truncate(records.len().saturating_sub(cut)); // the broker cuts the last batch short
        Partition { aborted, records, tags }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any split of any body gives the same digest as the whole, and its figures are `walk`'s.
    #[test]
    fn any_split_gives_the_whole_digest(
        version in prop::sample::select(vec![4i16, 7, 11, 12, 13, 18]),
        topics in prop::collection::vec(prop::collection::vec(partition(), 0..4), 0..3),
        header_tags in prop::collection::vec(0usize..30, 0..3),
        cuts in prop::collection::vec(0usize..4000, 0..12),
    ) {
        let (body, blobs) = fetch(version, &header_tags, &topics, &[0]);
        let whole = digest_in(version, false, &body, body.len()).0;
        prop_assert!(whole.is_some());
        let want: Vec<i64> = blobs.iter().flat_map(|b| figures(b)).collect();
        prop_assert_eq!(&whole.as_ref().unwrap().stats, &want);
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(digest_cut(version, &body, &cuts), whole);
    }

    /// Any bytes at all, cut anywhere: the same outcome as whole, and never more examined than
    /// twice the body and a few bytes.
    #[test]
    fn any_bytes_any_split(
        version in prop::sample::select(vec![4i16, 11, 12, 16]),
        body in prop::collection::vec(any::<u8>(), 0..600),
        cuts in prop::collection::vec(0usize..600, 0..8),
    ) {
        let (whole, base) = digest_in(version, false, &body, body.len().max(1));
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(digest_cut(version, &body, &cuts), whole);
        let (_, examined) = digest_in(version, false, &body, 1);
        prop_assert!(examined <= base + body.len() * ELEMENT_MAX);
    }
}

/// A tag buffer of more tags than `MAX_TAGS` ends the digest at its count, whether they are all
/// there or not, as `stream.MAX_TAGS` ends the Python road's parse; up to it, it is followed.
#[test]
fn a_tag_buffer_past_the_bound_is_not_followed() {
    let at_bound = fetch(12, &vec![0; MAX_TAGS as usize], &[], &[]).0;
    assert!(digest_in(12, false, &at_bound, at_bound.len()).0.is_some());
    let past = fetch(12, &vec![0; MAX_TAGS as usize + 1], &[], &[]).0;
    for step in [1, 64 << 10, past.len()] {
        let (d, examined) = digest_in(12, false, &past, step);
        assert!(d.is_none(), "{step}-byte reads");
        assert!(examined < 16, "{step}-byte reads: {examined} bytes examined");
    }
}

//! The framing and correlation of one connection (`Wire`) in its own language: any split of a
//! conversation gives the records of the whole; the refusals (sizes, answers to nothing,
//! correlation ids out of order) in the Python road's words; the client's frames still followed
//! after a SaslHandshake v0.

use proptest::prelude::*;

use super::*;

const MAX: i64 = 1 << 20;

fn wire() -> Wire {
    // ApiVersions v3+ and Metadata v9+ flexible; Fetch 4..=18 observed (routed)
    Wire::new(MAX, Ranges::new(&[(18, 3, 4), (3, 9, 13), (1, 12, 18)]), Ranges::new(&[(1, 4, 18)]))
}

/// A request frame: key, version, correlation id, client id "c" (header v1), `body` bytes.
fn request(key: i16, version: i16, corr: i32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&corr.to_be_bytes());
    f.extend_from_slice(&1i16.to_be_bytes());
    f.push(b'c');
    f.extend_from_slice(body);
    let mut out = (f.len() as i32).to_be_bytes().to_vec();
    out.extend(f);
    out
}

fn answer(corr: i32, body: &[u8]) -> Vec<u8> {
    let mut out = ((4 + body.len()) as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&corr.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The records of a conversation fed in `step`-byte reads: client then broker, one exchange at a
/// time, or the first refusal's words.
fn records(exchanges: &[(Vec<u8>, Vec<u8>)], step: usize) -> Result<Vec<i64>, String> {
    let mut w = wire();
    let mut t = 0;
    for (rq, rs) in exchanges {
        for (data, client) in [(rq, true), (rs, false)] {
            for piece in data.chunks(step.max(1)) {
                t += 1;
                let mut out = Routed::default();
                let r = if client { w.from_client(piece, 0, &mut out) } else { w.from_broker(piece, 0, &mut out) };
                r.map_err(|Framing(m)| m)?;
            }
        }
    }
    let _ = t;
    let (mut recs, _) = w.drain();
    // the times are the test's (all 0); the sizes, flags and ids are the framing's
    recs.chunks_mut(RECORD_WIDTH).for_each(|r| r[7..].fill(0));
    Ok(recs)
}

#[test]
fn an_answer_with_nothing_in_flight_is_refused_at_its_first_byte() {
    let mut w = wire();
    let mut out = Routed::default();
    assert_eq!(w.from_broker(&[0], 0, &mut out), Err(Framing("response from the broker matches no request".into())));
}

#[test]
fn sizes_the_python_road_refuses_are_refused_in_its_words() {
    for (raw, words) in [
        ([0u8, 0, 0, 0], "request frame size 0 is not positive"),
        ([0xff, 0xff, 0xff, 0xfe], "request frame size -2 is not positive"),
        ([0x7f, 0xff, 0xff, 0xff], "request frame of 2147483647 bytes exceeds the limit of 1048576 (raise max_frame_bytes if this is legitimate)"),
    ] {
        for step in [1, 4] {
            let mut w = wire();
            let mut got = Ok(());
            for piece in raw.chunks(step) {
                let mut out = Routed::default();
                got = w.from_client(piece, 0, &mut out);
                if got.is_err() {
                    break;
                }
            }
            assert_eq!(got, Err(Framing(words.into())), "{raw:?} in {step}-byte reads");
        }
    }
}

#[test]
fn an_answer_out_of_order_is_refused() {
    let exchanges = vec![(request(3, 1, 7, &[0, 0, 0, 0]), answer(8, &[0; 6]))];
    assert_eq!(records(&exchanges, 1 << 20),
               Err("response correlation id 8 does not match the oldest request's 7".into()));
}

#[test]
fn after_a_sasl_handshake_v0_the_clients_frames_are_still_followed() {
    let mut w = wire();
    let mut out = Routed::default();
    let hs = request(17, 0, 1, &[0, 5, b'P', b'L', b'A', b'I', b'N']);
    w.from_client(&hs, 0, &mut out).unwrap();
    assert!(w.needs_python);
    let token = [0u8, 0, 0, 9, 0, b'u', 0, b'p'];
    let mut out = Routed::default();
    w.from_client(&token, 0, &mut out).unwrap(); // 4 of its 9 bytes
    assert_eq!(out.rest, Some(0));
    assert!(w.client_mid_frame(), "a raw token begun is a frame begun");
    let mut out = Routed::default();
    w.from_client(&[1, 2, 3, 4, 5], 0, &mut out).unwrap();
    assert!(!w.client_mid_frame(), "and its end is seen");
}

proptest! {
    /// Any cut of a conversation gives the records of the whole.
    #[test]
    fn any_split_gives_the_records_of_the_whole(
        bodies in prop::collection::vec((prop::sample::select(vec![(3i16, 1i16), (18, 0), (1, 11), (0, 3)]),
                                         prop::collection::vec(any::<u8>(), 0..200),
                                         prop::collection::vec(any::<u8>(), 0..300)), 1..6),
        step in 1usize..64,
    ) {
        let exchanges: Vec<(Vec<u8>, Vec<u8>)> = bodies.iter().enumerate().map(|(i, ((k, v), rq, rs))| {
            // a Produce's acks read from its first bytes: 1 (an answer comes)
            let rq = if *k == 0 { [&[0xff, 0xff, 0, 1, 0, 0, 0x75, 0x30][..], rq].concat() } else { rq.clone() };
            (request(*k, *v, i as i32, &rq), answer(i as i32, rs))
        }).collect();
        let whole = records(&exchanges, 1 << 20);
        prop_assert!(whole.is_ok());
        prop_assert_eq!(records(&exchanges, step), whole);
    }
}

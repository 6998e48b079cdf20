//! The relay's state machine in its own language, over connected loopback sockets: what a
//! client and a broker on either side see, and what the relay queues for Python (`taken`, the
//! first half of `drain`). Bytes pass both ways as they came; a half-close delivers every byte
//! owed; a frame past the bound, or an answer to nothing, ends its own pair and no other; `end`
//! ends a pair; a full queue stops reading until a drain, losing nothing; a pair past its held
//! bound ends, counted; the partial-frame timer runs while a frame is partial; a closed relay
//! takes no connection. Every wait is bounded (`DEADLINE`).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::time::{Duration, Instant};

use super::*;
use crate::tls::tests::Pki as TestPki;
use crate::wire::{KIND_REQUEST, KIND_RESPONSE, RECORD_WIDTH};

const DEADLINE: Duration = Duration::from_secs(10);
const MAX_FRAME: i64 = 64 << 20;
const API_VERSIONS: i16 = 18;

/// Two connected loopback sockets.
fn connected() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let a = TcpStream::connect(l.local_addr().unwrap()).expect("connected");
    let (b, _) = l.accept().expect("accepted");
    (a, b)
}

fn relay(queue_max: Option<(usize, usize)>, held_max: Option<(usize, usize)>) -> PyRelay {
    // ApiVersions flexible from v3; nothing routed to Python: the core settles every exchange
    PyRelay::new(MAX_FRAME, vec![(API_VERSIONS, 3, i16::MAX)], Vec::new(), Vec::new(), false, queue_max, held_max)
        .unwrap_or_else(|_| panic!("a relay")) // (a PyErr is not shown without an interpreter)
}

/// A socket's kernel buffer for `option` (SO_SNDBUF, SO_RCVBUF) made as small as the kernel allows.
fn small_buffer(s: &impl AsRawFd, option: libc::c_int) {
    let size: libc::c_int = 4096;
    // SAFETY: a valid fd, and a pointer to an int that lives across the call
    let rc = unsafe {
        libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, option, (&size as *const libc::c_int).cast(),
                         std::mem::size_of::<libc::c_int>() as libc::socklen_t)
    };
    assert_eq!(rc, 0, "setsockopt");
}

/// A client and a broker, as their programs see them, joined by the relay: `(client, broker, conn)`.
fn joined(r: &mut PyRelay) -> (TcpStream, TcpStream, u64) {
    joined_with(r, false)
}

/// `joined`, the client's side with the smallest kernel buffers (what the client does not read
/// then waits in the relay, not in the kernel).
fn joined_with(r: &mut PyRelay, small: bool) -> (TcpStream, TcpStream, u64) {
    let (client, client_side) = connected();
    if small {
        small_buffer(&client, libc::SO_RCVBUF);
        small_buffer(&client_side, libc::SO_SNDBUF);
    }
    let (broker_side, broker) = connected();
    for s in [&client, &broker] {
        s.set_read_timeout(Some(DEADLINE)).unwrap();
    }
    let conn = r.add(client_side.into_raw_fd(), broker_side.into_raw_fd()).unwrap_or_else(|_| panic!("taken"));
    (client, broker, conn)
}

/// An ApiVersions v0 request (header v1, client id "t").
fn request(corr: i32) -> Vec<u8> {
    request_of(API_VERSIONS, 0, corr, &[])
}

/// A request of `key` and `version` (client id "t"), `rest` after its client id: the header's
/// tags and a body, which the relay does not read.
fn request_of(key: i16, version: i16, corr: i32, rest: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&corr.to_be_bytes());
    f.extend_from_slice(&1i16.to_be_bytes());
    f.push(b't');
    f.extend_from_slice(rest);
    let mut out = (f.len() as i32).to_be_bytes().to_vec();
    out.extend(f);
    out
}

/// `frame` with its correlation id set to `corr`.
fn with_corr(frame: &[u8], corr: i32) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[4..8].copy_from_slice(&corr.to_be_bytes());
    f
}

/// An answer frame: `corr`, then `body` bytes of `fill`.
fn answer(corr: i32, body: usize, fill: u8) -> Vec<u8> {
    let mut out = ((4 + body) as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&corr.to_be_bytes());
    out.resize(8 + body, fill);
    out
}

fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).expect("the bytes, within the deadline");
    buf
}

/// The socket's end: Ok(true) at its end of stream (or a reset), false where bytes came.
fn at_end(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) => panic!("no end within the deadline: {e}"),
    }
}

/// Items taken until `done` holds of all taken so far (bounded by `DEADLINE`).
fn until(r: &PyRelay, what: &str, done: impl Fn(&[Item]) -> bool) -> Vec<Item> {
    let start = Instant::now();
    let mut all = Vec::new();
    loop {
        all.extend(r.taken());
        if done(&all) {
            return all;
        }
        assert!(start.elapsed() < DEADLINE, "{what}: not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn closed(items: &[Item], conn: u64) -> Option<&str> {
    items.iter().find(|it| it.conn == conn && it.kind == CLOSED).map(|it| it.reason.as_str())
}

/// The records of `conn`'s items as `(kind, correlation id)`.
fn exchanges(items: &[Item], conn: u64) -> Vec<(i64, i64)> {
    items.iter().filter(|it| it.conn == conn).filter_map(|it| it.records.as_ref())
        .flat_map(|(r, _)| r.chunks(RECORD_WIDTH).map(|rec| (rec[0], rec[1])).collect::<Vec<_>>()).collect()
}

/// One exchange through `conn`: the broker gets the request as sent, the client the answer.
fn exchange(client: &mut TcpStream, broker: &mut TcpStream, corr: i32) {
    let rq = request(corr);
    client.write_all(&rq).unwrap();
    assert_eq!(read_exact(broker, rq.len()), rq);
    let rs = answer(corr, 100, 7);
    broker.write_all(&rs).unwrap();
    assert_eq!(read_exact(client, rs.len()), rs);
}

#[test]
fn bytes_pass_both_ways_as_they_came_and_each_exchange_is_recorded() {
    let mut r = relay(None, None);
    let (mut client, mut broker, conn) = joined(&mut r);
    let rqs: Vec<u8> = (1..=3).flat_map(request).collect();
    client.write_all(&rqs).unwrap();
    assert_eq!(read_exact(&mut broker, rqs.len()), rqs);
    let rss: Vec<u8> = (1..=3).flat_map(|c| answer(c, 5000 * c as usize, c as u8)).collect();
    for piece in [&rss[..3], &rss[3..5001], &rss[5001..]] {
        broker.write_all(piece).unwrap(); // a size prefix cut, an answer cut in its body
        broker.flush().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(read_exact(&mut client, rss.len()), rss);
    let items = until(&r, "six records", |it| exchanges(it, conn).len() == 6);
    let mut got = exchanges(&items, conn);
    got.sort_unstable();
    assert_eq!(got, [(KIND_REQUEST, 1), (KIND_REQUEST, 2), (KIND_REQUEST, 3), (KIND_RESPONSE, 1), (KIND_RESPONSE, 2),
                     (KIND_RESPONSE, 3)]);
    assert!(closed(&items, conn).is_none());
}

#[test]
fn a_half_close_delivers_every_byte_owed_before_the_pair_ends() {
    let mut r = relay(None, None);
    let (mut client, mut broker, conn) = joined(&mut r);
    let rq = request(1);
    client.write_all(&rq).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_exact(&mut broker, rq.len()), rq);
    assert!(at_end(&mut broker), "the client's end of stream is passed on");
    let rs = answer(1, 8 << 20, 9);
    let writer = std::thread::spawn(move || {
        broker.write_all(&rs).unwrap();
        drop(broker); // the broker closes with bytes still owed to the client
        rs
    });
    std::thread::sleep(Duration::from_millis(50)); // the broker's close comes before the client reads
    let mut got = Vec::new();
    client.read_to_end(&mut got).expect("every byte, then the end");
    let rs = writer.join().unwrap();
    assert_eq!(got.len(), rs.len());
    assert!(got == rs);
    let items = until(&r, "the pair's end", |it| closed(it, conn).is_some());
    assert_eq!(closed(&items, conn), Some("broker closed the connection after the client's end of stream"));
}

#[test]
fn a_frame_past_the_bound_ends_its_own_pair_and_no_other() {
    let mut r = relay(None, None);
    let (mut bad, _bad_broker, bad_conn) = joined(&mut r);
    let (mut client, mut broker, conn) = joined(&mut r);
    exchange(&mut client, &mut broker, 1);
    bad.write_all(&0x7fff_ffffi32.to_be_bytes()).unwrap();
    let items = until(&r, "the bad pair's end", |it| closed(it, bad_conn).is_some());
    assert_eq!(closed(&items, bad_conn),
               Some(format!("request frame of {} bytes exceeds the limit of {MAX_FRAME} (raise max_frame_bytes if \
                             this is legitimate)", 0x7fff_ffff).as_str()));
    assert!(at_end(&mut bad));
    exchange(&mut client, &mut broker, 2);
    assert!(closed(&r.taken(), conn).is_none());
}

#[test]
fn broker_bytes_that_answer_nothing_end_the_pair_unwritten() {
    let mut r = relay(None, None);
    let (mut client, mut broker, conn) = joined(&mut r);
    broker.write_all(&answer(5, 10, 1)).unwrap();
    let items = until(&r, "the pair's end", |it| closed(it, conn).is_some());
    assert_eq!(closed(&items, conn), Some("response from the broker matches no request"));
    assert!(at_end(&mut client), "none of the bytes reached the client");
}

#[test]
fn end_closes_the_pair_and_says_so() {
    let mut r = relay(None, None);
    let (mut client, mut broker, conn) = joined(&mut r);
    exchange(&mut client, &mut broker, 1);
    r.end(conn);
    let items = until(&r, "the pair's end", |it| closed(it, conn).is_some());
    assert_eq!(closed(&items, conn), Some("closed by the proxy"));
    assert!(at_end(&mut client) && at_end(&mut broker));
    assert!(r.timers().is_empty(), "an ended pair has no timers");
}

#[test]
fn a_full_queue_stops_reading_until_a_drain_and_loses_nothing() {
    let mut r = relay(Some((4, 1 << 20)), None);
    let (mut client, mut broker, conn) = joined(&mut r);
    broker.set_read_timeout(Some(Duration::from_millis(1000))).unwrap();
    // one request a read, none drained: each read queues an item until the bound stops the reads
    let mut passed = 0;
    for corr in 0..20 {
        let rq = request(corr);
        client.write_all(&rq).unwrap();
        let mut buf = vec![0; rq.len()];
        if broker.read_exact(&mut buf).is_err() {
            break;
        }
        passed += 1;
    }
    assert!((4..20).contains(&passed), "the reads stop at the queue's bound: {passed} requests passed");
    assert!(r.queue_depth().4 >= 1, "the bound counted");
    // drains let it read again: every request written reaches the broker, in order
    broker.set_read_timeout(Some(DEADLINE)).unwrap();
    let taker = std::thread::scope(|s| {
        let h = s.spawn(|| until(&r, "every request's record", |it| exchanges(it, conn).len() >= 20));
        client.write_all(&(passed + 1..20).flat_map(request).collect::<Vec<u8>>()).unwrap();
        let rest: Vec<u8> = (passed..20).flat_map(request).collect(); // the one that waited, then these
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < rest.len() && start.elapsed() < DEADLINE {
            let mut buf = [0u8; 4096];
            if let Ok(n) = broker.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        assert!(got == rest, "the requests after the stop: {} of {} bytes", got.len(), rest.len());
        h.join().unwrap()
    });
    assert!(closed(&taker, conn).is_none());
}

#[test]
fn a_pair_past_its_held_bound_ends_counted_and_the_others_flow() {
    // a pair may hold nothing: the first byte left waiting for a client that does not read ends
    // it (a bound of some KiB holds as long as the reads are smaller, which a loaded machine makes
    // them: the relay then waits, back-pressure, which is right but not this test's case)
    let mut r = relay(None, Some((0, 64 << 20)));
    let (mut stuck, mut stuck_broker, stuck_conn) = joined_with(&mut r, true);
    let (mut client, mut broker, _) = joined(&mut r);
    let rq = request(1);
    stuck.write_all(&rq).unwrap();
    assert_eq!(read_exact(&mut stuck_broker, rq.len()), rq);
    // the client reads nothing: the answer waits in the relay past the pair's bound
    let writer = std::thread::spawn(move || {
        let _ = stuck_broker.write_all(&answer(1, 48 << 20, 3)); // cut short when the pair ends
    });
    let items = until(&r, "the stuck pair's end", |it| closed(it, stuck_conn).is_some());
    let reason = closed(&items, stuck_conn).unwrap();
    assert!(reason.starts_with("relay buffers: the connection holds"), "{reason}");
    writer.join().unwrap();
    exchange(&mut client, &mut broker, 1);
    assert_eq!(r.held().0, 0, "nothing held once the stuck pair ended and the other's answer went");
    drop(stuck);
}

#[test]
fn the_partial_frame_timer_runs_while_a_frame_is_partial() {
    let mut r = relay(None, None);
    let (mut client, mut broker, conn) = joined(&mut r);
    let rq = request(1);
    client.write_all(&rq[..6]).unwrap();
    let partial = |r: &PyRelay| r.timers().iter().find(|t| t.0 == conn).map_or(0, |t| t.4); // 0 until adopted
    let start = Instant::now();
    while partial(&r) == 0 {
        assert!(start.elapsed() < DEADLINE, "the timer did not start");
        std::thread::sleep(Duration::from_millis(2));
    }
    client.write_all(&rq[6..]).unwrap();
    assert_eq!(read_exact(&mut broker, rq.len()), rq);
    assert_eq!(partial(&r), 0, "the frame whole: no partial frame");
}

#[test]
fn a_closed_relay_takes_no_connection() {
    let mut r = relay(None, None);
    r.shared.stop.store(true, Ordering::Relaxed);
    bump(r.shared.wake_fd);
    r.thread.take().expect("its thread").join().unwrap();
    let (a, b) = connected();
    let (fa, fb) = (a.into_raw_fd(), b.into_raw_fd());
    assert!(r.add(fa, fb).is_err(), "refused");
    // the fds are still the caller's: closing them is this test's to do, once
    // SAFETY: fa and fb were given up by their streams above and refused by the relay
    unsafe {
        assert_eq!(libc::close(fa), 0);
        assert_eq!(libc::close(fb), 0);
    }
}

// ------------------------------------------------------------------ a client's TLS, carried by the core

/// A TLS client (rustls, blocking) and a broker joined by the relay, which carries the client's
/// TLS from its handshake on (`add_tls`): `(client, broker, conn)`; with `mtls`, a client
/// certificate is required and the client has one of the authority's.
fn joined_tls(r: &mut PyRelay, pki: &TestPki, mtls: bool, cert: bool)
              -> (rustls::StreamOwned<rustls::ClientConnection, TcpStream>, TcpStream, u64) {
    let (client, client_side) = connected();
    let (broker_side, broker) = connected();
    for s in [&client, &broker] {
        s.set_read_timeout(Some(DEADLINE)).unwrap();
    }
    let session = crate::tls::TlsSession::server(&pki.server_config(mtls)).expect("a session");
    let conn = r.add_tls(client_side.into_raw_fd(), broker_side.into_raw_fd(), session)
        .unwrap_or_else(|_| panic!("taken"));
    (rustls::StreamOwned::new(pki.client(cert.then_some(&pki.client)), client), broker, conn)
}

#[test]
fn a_tls_clients_bytes_pass_decrypted_both_ways_and_each_exchange_is_recorded() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (mut client, mut broker, conn) = joined_tls(&mut r, &pki, false, false);
    for corr in 1..=3 {
        let rq = request(corr);
        client.write_all(&rq).unwrap();
        assert_eq!(read_exact(&mut broker, rq.len()), rq, "the broker reads the plaintext request");
        let rs = answer(corr, 100 * corr as usize, 7);
        broker.write_all(&rs).unwrap();
        let mut got = vec![0; rs.len()];
        client.read_exact(&mut got).expect("the answer, decrypted by the client");
        assert_eq!(got, rs);
    }
    let items = until(&r, "three exchanges recorded", |all| exchanges(all, conn).len() >= 6);
    let seen = exchanges(&items, conn);
    for corr in 1..=3i64 {
        assert!(seen.contains(&(KIND_REQUEST, corr)) && seen.contains(&(KIND_RESPONSE, corr)), "{seen:?}");
    }
    // the client's close_notify is its end of stream: passed on to the broker, whose close ends the pair
    client.conn.send_close_notify();
    client.flush().unwrap();
    assert!(at_end(&mut broker), "the broker sees the client's end");
    drop(broker);
    let items = until(&r, "the pair's end", |all| closed(all, conn).is_some());
    assert_eq!(closed(&items, conn), Some("broker closed the connection after the client's end of stream"));
}

#[test]
fn a_big_answer_reaches_a_slow_tls_client_whole_and_in_order() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (mut client, mut broker, _conn) = joined_tls(&mut r, &pki, false, false);
    small_buffer(client.get_ref(), libc::SO_RCVBUF);
    let rq = request(9);
    client.write_all(&rq).unwrap();
    assert_eq!(read_exact(&mut broker, rq.len()), rq);
    // four times what the session takes at once: the rest waits in the pair, the broker is not
    // read meanwhile, and every byte still comes
    let rs = answer(9, 4 * crate::tls::OUT_LIMIT, 3);
    let writer = std::thread::spawn(move || {
        broker.write_all(&rs).unwrap();
        (broker, rs)
    });
    let mut got = vec![0; 8 + 4 * crate::tls::OUT_LIMIT];
    std::thread::sleep(Duration::from_millis(50)); // the client slow to begin reading
    client.read_exact(&mut got).expect("the whole answer");
    let (_broker, rs) = writer.join().unwrap();
    assert_eq!(got, rs);
}

#[test]
fn a_failed_handshake_ends_its_own_pair_and_no_other() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (mut plain_client, mut plain_broker, _plain) = joined(&mut r);
    // bytes that are not TLS, on a connection whose TLS the core carries
    let (mut http, http_side) = connected();
    let (broker_side, _broker) = connected();
    http.set_read_timeout(Some(DEADLINE)).unwrap();
    let session = crate::tls::TlsSession::server(&pki.server_config(false)).expect("a session");
    let bad = r.add_tls(http_side.into_raw_fd(), broker_side.into_raw_fd(), session).unwrap_or_else(|_| panic!("taken"));
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // mTLS: a client with no certificate is refused the same way
    let (mut anonymous, _b2, refused) = joined_tls(&mut r, &pki, true, false);
    let _ = anonymous.write_all(&request(1)); // the handshake runs on its first write, and fails
    let items = until(&r, "both ends", |all| closed(all, bad).is_some() && closed(all, refused).is_some());
    let reason = closed(&items, bad).unwrap();
    assert!(reason.starts_with("tls handshake failed: "), "{reason}");
    let reason = closed(&items, refused).unwrap();
    assert!(reason.starts_with("tls handshake failed: ") && reason.to_lowercase().contains("certificate"), "{reason}");
    // the client is told why (a TLS alert: content type 21), then the connection ends
    let mut told = Vec::new();
    http.read_to_end(&mut told).expect("the alert and the end, within the deadline");
    assert_eq!(told.first(), Some(&21u8), "{told:?}");
    // the plaintext pair never noticed
    exchange(&mut plain_client, &mut plain_broker, 5);
    // and a client with the authority's certificate gets through
    let (mut trusted, mut broker, _) = joined_tls(&mut r, &pki, true, true);
    trusted.write_all(&request(2)).unwrap();
    assert_eq!(read_exact(&mut broker, request(2).len()), request(2));
}

// ------------------------------------------------------------------ a TLS client fronted, then fused

/// A TLS client whose connection the core takes from its first byte (`front`), the bridge's
/// Python end as the test's socket: `(client, python, front id)`.
fn fronted(r: &mut PyRelay, pki: &TestPki) -> (rustls::StreamOwned<rustls::ClientConnection, TcpStream>, UnixStream, u64) {
    r.tls_config(&pki.path("server.pem"), &pki.path("server.key"), None).unwrap_or_else(|_| panic!("TLS settings"));
    let (client, client_side) = connected();
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    let (id, python_fd) = r.front(client_side.into_raw_fd()).unwrap_or_else(|_| panic!("fronted"));
    // SAFETY: the fd `front` gave, the test's alone
    let python = unsafe { UnixStream::from_raw_fd(python_fd) };
    python.set_read_timeout(Some(DEADLINE)).unwrap();
    (rustls::StreamOwned::new(pki.client(None), client), python, id)
}

fn read_unix(s: &mut UnixStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).expect("the bytes, within the deadline");
    buf
}

#[test]
fn a_fronted_tls_client_talks_to_python_in_plaintext_and_is_fused_into_a_pair_at_the_hand_over() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (mut client, mut python, front) = fronted(&mut r, &pki);
    // the first exchange on the event loop's road: plaintext both ways through the bridge
    client.write_all(&request(1)).unwrap();
    assert_eq!(read_unix(&mut python, request(1).len()), request(1));
    python.write_all(&answer(1, 40, 1)).unwrap();
    let mut got = vec![0; answer(1, 40, 1).len()];
    client.read_exact(&mut got).unwrap();
    assert_eq!(got, answer(1, 40, 1));
    // the client pipelines its next request before the hand-over, and Python's second answer
    // is written just before it: the first reaches the broker, the second the client, in order
    client.write_all(&request(2)).unwrap();
    std::thread::sleep(Duration::from_millis(50)); // in the bridge, unread by Python
    python.write_all(&answer(2, 30, 2)).unwrap();
    let (broker_side, mut broker) = connected();
    broker.set_read_timeout(Some(DEADLINE)).unwrap();
    // SAFETY: dup of the test's own fd; the relay closes the duplicate
    let dup = unsafe { libc::dup(python.as_raw_fd()) };
    let conn = r.add(dup, broker_side.into_raw_fd()).unwrap_or_else(|_| panic!("taken"));
    let mut got = vec![0; answer(2, 30, 2).len()];
    client.read_exact(&mut got).unwrap();
    assert_eq!(got, answer(2, 30, 2), "Python's answer written before the hand-over comes first");
    assert_eq!(read_exact(&mut broker, request(2).len()), request(2), "the request Python had not read");
    for corr in 3..=4 {
        broker.write_all(&answer(corr - 1, 20, 9)).unwrap(); // the broker answers the one before
        client.write_all(&request(corr)).unwrap();
        let mut got = vec![0; answer(corr - 1, 20, 9).len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, answer(corr - 1, 20, 9));
        assert_eq!(read_exact(&mut broker, request(corr).len()), request(corr));
    }
    // the bridge is gone: Python's end reads its end of stream; the front queued nothing
    let mut rest = Vec::new();
    python.read_to_end(&mut rest).expect("the bridge's end");
    assert!(rest.is_empty());
    let items = until(&r, "the fused pair's exchanges", |all| exchanges(all, conn).len() >= 4);
    assert_eq!(closed(&items, front), None);
}

#[test]
fn a_fronts_failed_handshake_is_queued_under_its_id_and_python_sees_the_end() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (client, mut python, front) = fronted(&mut r, &pki);
    let mut raw = client.into_parts().1; // the socket, without TLS
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let items = until(&r, "the front's end", |all| closed(all, front).is_some());
    let reason = closed(&items, front).unwrap();
    assert!(reason.starts_with("tls handshake failed: "), "{reason}");
    let mut rest = Vec::new();
    python.read_to_end(&mut rest).expect("the bridge's end");
    assert!(rest.is_empty(), "no plaintext from a failed handshake");
    let mut told = Vec::new();
    raw.read_to_end(&mut told).expect("the alert and the end");
    assert_eq!(told.first(), Some(&21u8), "a TLS alert first: {told:?}");
}

#[test]
fn python_closing_its_end_of_a_front_closes_the_clients_session_cleanly() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (mut client, mut python, front) = fronted(&mut r, &pki);
    client.write_all(&request(1)).unwrap();
    assert_eq!(read_unix(&mut python, request(1).len()), request(1));
    drop(python);
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).expect("a clean end: the server's close_notify");
    assert!(rest.is_empty());
    let items = until(&r, "the front's end", |all| closed(all, front).is_some());
    assert_eq!(closed(&items, front), Some("closed by the proxy"));
}

#[test]
fn bytes_that_are_not_tls_after_the_handshake_end_the_pair_as_a_tls_error() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (mut client, mut broker, conn) = joined_tls(&mut r, &pki, false, false);
    client.write_all(&request(1)).unwrap();
    assert_eq!(read_exact(&mut broker, request(1).len()), request(1));
    // a record that decrypts to nothing: the session is broken, the pair ends with the reason
    client.get_mut().write_all(&[23, 3, 3, 0, 40]).unwrap();
    client.get_mut().write_all(&[0x5a; 40]).unwrap();
    let items = until(&r, "the pair's end", |all| closed(all, conn).is_some());
    let reason = closed(&items, conn).unwrap();
    assert!(reason.starts_with("tls error: "), "{reason}");
    assert!(at_end(&mut broker), "the broker's connection closes with the pair");
}

// ------------------------------------------------------------------ a TLS broker backed, then fused

/// A connection to a TLS broker whose session the core holds from its ClientHello (`back`), the
/// broker a rustls server (blocking) with the authority's certificate for "localhost", the
/// bridge's Python end as the test's socket: `(broker, python, back id)`.
fn backed(r: &mut PyRelay, pki: &TestPki, name: &str)
          -> (rustls::StreamOwned<rustls::ServerConnection, TcpStream>, UnixStream, u64) {
    r.upstream_tls_config(&pki.path("ca.pem"), None, None).unwrap_or_else(|_| panic!("TLS settings"));
    let (core_side, broker) = connected();
    broker.set_read_timeout(Some(DEADLINE)).unwrap();
    let (id, python_fd) = r.back(core_side.into_raw_fd(), name).unwrap_or_else(|_| panic!("backed"));
    // SAFETY: the fd `back` gave, the test's alone
    let python = unsafe { UnixStream::from_raw_fd(python_fd) };
    python.set_read_timeout(Some(DEADLINE)).unwrap();
    let session = rustls::ServerConnection::new(pki.server_config(false)).expect("a server session");
    (rustls::StreamOwned::new(session, broker), python, id)
}

fn ready(items: &[Item], conn: u64) -> bool {
    items.iter().any(|it| it.conn == conn && it.kind == READY)
}

#[test]
fn a_backed_tls_broker_talks_to_python_in_plaintext_says_ready_and_is_fused_at_the_hand_over() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (mut broker, mut python, back) = backed(&mut r, &pki, "localhost");
    // the first exchange on the event loop's road: Python's request waits for the handshake,
    // then reaches the broker decrypted; the broker's answer comes back in plaintext
    python.write_all(&request(1)).unwrap();
    let mut got = vec![0; request(1).len()];
    broker.read_exact(&mut got).expect("the request, once the handshake completed");
    assert_eq!(got, request(1));
    until(&r, "the back's READY", |all| ready(all, back));
    broker.write_all(&answer(1, 40, 1)).unwrap();
    assert_eq!(read_unix(&mut python, answer(1, 40, 1).len()), answer(1, 40, 1));
    // the hand-over: the pair's broker side is the TLS socket from here
    let (mut client, client_side) = connected();
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    // SAFETY: dup of the test's own fd; the relay closes the duplicate
    let dup = unsafe { libc::dup(python.as_raw_fd()) };
    let conn = r.add(client_side.into_raw_fd(), dup).unwrap_or_else(|_| panic!("taken"));
    for corr in 2..=4 {
        client.write_all(&request(corr)).unwrap();
        let mut got = vec![0; request(corr).len()];
        broker.read_exact(&mut got).unwrap();
        assert_eq!(got, request(corr));
        broker.write_all(&answer(corr, 20 << corr, 9)).unwrap();
        assert_eq!(read_exact(&mut client, answer(corr, 20 << corr, 9).len()), answer(corr, 20 << corr, 9));
    }
    let mut rest = Vec::new();
    python.read_to_end(&mut rest).expect("the bridge's end");
    assert!(rest.is_empty());
    let items = until(&r, "the fused pair's exchanges", |all| exchanges(all, conn).len() >= 3);
    assert_eq!(closed(&items, back), None);
    // the broker's close_notify is its end: the pair ends in a broker's words
    broker.conn.send_close_notify();
    broker.flush().unwrap();
    let items = until(&r, "the pair's end", |all| closed(all, conn).is_some());
    assert!(closed(&items, conn).unwrap().starts_with("broker closed the connection"), "{:?}", closed(&items, conn));
    assert!(at_end(&mut client));
}

#[test]
fn a_broker_whose_certificate_does_not_name_it_is_never_sent_a_byte_of_plaintext() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (broker, mut python, back) = backed(&mut r, &pki, "kafka-9.example.com");
    python.write_all(&request(1)).unwrap();
    let mut raw = broker.sock;
    let serving = std::thread::spawn(move || {
        // the broker's side of the handshake, by hand: what it reads is never the request's bytes
        let mut session = rustls::ServerConnection::new(TestPki::new().server_config(false)).expect("a session");
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = raw.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            let _ = session.read_tls(&mut &buf[..n]);
            if session.process_new_packets().is_err() {
                break;
            }
            while session.wants_write() {
                if session.write_tls(&mut raw).is_err() {
                    break;
                }
            }
        }
        seen
    });
    let items = until(&r, "the back's end", |all| closed(all, back).is_some());
    let reason = closed(&items, back).unwrap();
    assert!(reason.starts_with("broker tls handshake failed: ") && reason.to_lowercase().contains("certificate"),
            "{reason}");
    assert!(!ready(&items, back));
    let mut rest = Vec::new();
    python.read_to_end(&mut rest).expect("the bridge's end");
    assert!(rest.is_empty(), "no plaintext from a failed handshake");
    let seen = serving.join().unwrap();
    let request = request(1);
    assert!(!seen.windows(request.len()).any(|w| w == request.as_slice()), "the request reached the broker");
}

#[test]
fn bytes_that_are_not_tls_from_a_backed_broker_end_its_handshake_in_a_brokers_words() {
    let pki = TestPki::new();
    let mut r = relay(None, None);
    let (broker, mut python, back) = backed(&mut r, &pki, "localhost");
    let mut raw = broker.sock;
    let mut hello = [0u8; 1];
    raw.read_exact(&mut hello).expect("the ClientHello begins");
    assert_eq!(hello[0], 22, "a handshake record first");
    raw.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
    let items = until(&r, "the back's end", |all| closed(all, back).is_some());
    assert!(closed(&items, back).unwrap().starts_with("broker tls handshake failed: "), "{:?}", closed(&items, back));
    let mut rest = Vec::new();
    python.read_to_end(&mut rest).expect("the bridge's end");
    assert!(rest.is_empty());
}

// ---------------------------------------------------------------- a proxy away from its brokers
const FETCH: i16 = 1;

/// The relay of a proxy away from its brokers, as `proxy/relayed.py` makes it: the answers to
/// `key` held whole (flexible from `flexible_from`; `held_from`: the versions held), nothing
/// routed, its bounds a Fetch answer at its largest over a sidecar's.
fn central_relay(key: i16, flexible_from: i16, held_from: i16) -> PyRelay {
    let held = (HELD_MAX_PAIR + MAX_FRAME as usize, HELD_MAX_TOTAL + 4 * MAX_FRAME as usize);
    PyRelay::new(MAX_FRAME, vec![(API_VERSIONS, 3, i16::MAX), (key, flexible_from, i16::MAX)], Vec::new(),
                 vec![(key, held_from, i16::MAX)], false, None, Some(held))
        .unwrap_or_else(|_| panic!("a relay"))
}

/// A Fetch v16 request (header v2: its tags, then a body).
fn fetch_request(corr: i32) -> Vec<u8> {
    request_of(FETCH, 16, corr, &[0, 0, 0, 0])
}

/// A Fetch v16 answer: one partition with `records` bytes of records, and its top-level tags
/// `tags` as written (`[0]`: none).
fn fetch_answer(corr: i32, records: usize, tags: &[u8]) -> Vec<u8> {
    let mut b = corr.to_be_bytes().to_vec();
    b.push(0); // the header's tags
    b.extend_from_slice(&[0; 10]); // ThrottleTimeMs, ErrorCode, SessionId
    b.push(2); // Responses: one topic
    b.extend_from_slice(&[7; 16]); // its TopicId
    b.push(2); // one partition
    b.extend_from_slice(&[0; 30]); // index, error, high watermark, last stable, log start
    b.push(0); // AbortedTransactions: null
    b.extend_from_slice(&(-1i32).to_be_bytes()); // PreferredReadReplica
    let mut n = records as u64 + 1; // Records: a compact length, then the bytes
    while n >= 0x80 {
        b.push((n as u8) | 0x80);
        n >>= 7;
    }
    b.push(n as u8);
    b.resize(b.len() + records, 0x5a);
    b.extend_from_slice(&[0, 0]); // the partition's tags, the topic's
    b.extend_from_slice(tags);
    let mut out = (b.len() as i32).to_be_bytes().to_vec();
    out.extend(b);
    out
}

#[test]
fn a_central_fetch_answer_naming_no_broker_goes_on_unchanged_past_a_sidecars_bound() {
    let mut r = central_relay(FETCH, 12, 16);
    let (mut client, mut broker, conn) = joined(&mut r);
    let req = fetch_request(5);
    client.write_all(&req).unwrap();
    assert_eq!(read_exact(&mut broker, req.len()), req);
    let answer = fetch_answer(5, HELD_MAX_PAIR + (4 << 20), &[0]); // held whole: more than 16 MiB
    let len = answer.len();
    let writer = std::thread::spawn(move || {
        broker.write_all(&answer).unwrap();
        (broker, answer)
    });
    let got = read_exact(&mut client, len);
    let (_broker, answer) = writer.join().unwrap();
    assert!(got == answer, "the answer as it came");
    let items = r.taken();
    assert!(items.iter().all(|it| it.kind != REWRITE), "no rewrite asked");
    assert_eq!(closed(&items, conn), None);
}

#[test]
fn a_central_fetch_answer_naming_a_broker_waits_for_pythons_rewrite() {
    let mut r = central_relay(FETCH, 12, 16);
    let (mut client, mut broker, conn) = joined(&mut r);
    // NodeEndpoints (tag 0): node 3 at "h":9092, no rack
    let endpoints: &[u8] = &[1, 0, 13, 2, 0, 0, 0, 3, 2, b'h', 0, 0, 0x23, 0x84, 0, 0];
    for (corr, tags) in [(5, endpoints), (6, &[0u8][..])] {
        client.write_all(&fetch_request(corr)).unwrap();
        read_exact(&mut broker, fetch_request(corr).len());
        broker.write_all(&fetch_answer(corr, 100, tags)).unwrap();
        if corr == 6 {
            break;
        }
        let items = until(&r, "the answer to rewrite", |items| items.iter().any(|it| it.kind == REWRITE));
        let held = items.iter().find(|it| it.kind == REWRITE).unwrap();
        assert_eq!((held.conn, held.api, &held.python), (conn, Some((FETCH, 16)), &fetch_answer(5, 100, endpoints)));
        r.answer(conn, fetch_answer(5, 3, &[0]), None); // Python's rewrite, in its place
    }
    assert_eq!(read_exact(&mut client, fetch_answer(5, 3, &[0]).len()), fetch_answer(5, 3, &[0]));
    assert_eq!(read_exact(&mut client, fetch_answer(6, 100, &[0]).len()), fetch_answer(6, 100, &[0]), "the next as it came");

}

const METADATA: i16 = 3;

/// One exchange of `key` v12 through the relay, up to the broker's answer: `answer` with its
/// correlation id set to `corr`.
fn held_exchange(client: &mut TcpStream, broker: &mut TcpStream, key: i16, corr: i32, answer: &[u8]) {
    let req = request_of(key, 12, corr, &[0, 0]);
    client.write_all(&req).unwrap();
    assert_eq!(read_exact(broker, req.len()), req);
    broker.write_all(&with_corr(answer, corr)).unwrap();
}

#[test]
fn a_metadata_answer_is_repeated_at_the_generation_python_gave_and_learned_from_in_order() {
    let mut r = central_relay(METADATA, 9, 0);
    let (mut client, mut broker, conn) = joined(&mut r);
    let asked = answer(0, 40, 1); // the broker's answer, the same each time
    let rewritten = answer(0, 30, 2); // Python's
    let rewrites = |items: &[Item]| items.iter().filter(|it| it.kind == REWRITE).count();
    let learns = |items: &[Item]| items.iter().filter(|it| it.kind == LEARN).count();
    // the first: Python rewrites it at generation 0
    held_exchange(&mut client, &mut broker, METADATA, 1, &asked);
    let items = until(&r, "the first to rewrite", |items| rewrites(items) == 1);
    assert_eq!(learns(&items), 0);
    r.answer(conn, with_corr(&rewritten, 1), Some(0));
    assert_eq!(read_exact(&mut client, rewritten.len()), with_corr(&rewritten, 1));
    // a repeat at generation 0: the core's, with its own correlation id, queued to learn from
    held_exchange(&mut client, &mut broker, METADATA, 2, &asked);
    assert_eq!(read_exact(&mut client, rewritten.len()), with_corr(&rewritten, 2));
    let items = until(&r, "the repeat to learn from", |items| learns(items) == 1);
    assert_eq!(rewrites(&items), 0);
    let learned = items.iter().find(|it| it.kind == LEARN).unwrap();
    assert_eq!((learned.api, &learned.python), (Some((METADATA, 12)), &with_corr(&asked, 2)));
    // the brokers known changed: Python rewrites it again, and says it may not be repeated
    r.set_generation(1);
    held_exchange(&mut client, &mut broker, METADATA, 3, &asked);
    until(&r, "a rewrite at the new generation", |items| rewrites(items) == 1);
    r.answer(conn, with_corr(&rewritten, 3), None);
    assert_eq!(read_exact(&mut client, rewritten.len()), with_corr(&rewritten, 3));
    held_exchange(&mut client, &mut broker, METADATA, 4, &asked);
    until(&r, "a rewrite of what was not to be repeated", |items| rewrites(items) == 1);
    r.answer(conn, with_corr(&rewritten, 4), Some(1));
    assert_eq!(read_exact(&mut client, rewritten.len()), with_corr(&rewritten, 4));
    held_exchange(&mut client, &mut broker, METADATA, 5, &asked);
    assert_eq!(read_exact(&mut client, rewritten.len()), with_corr(&rewritten, 5), "repeated at generation 1");
}

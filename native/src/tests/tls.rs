//! TLS towards a client in the core's own language, over Unix socketpairs: a rustls client on one
//! end (its bytes pumped by hand, so each test is deterministic), the core's `TlsSession` on the
//! other, with certificates made for the test (rcgen). The handshake and bytes both ways, however
//! the client's bytes are split; mTLS (a certificate required, one from another authority
//! refused); bytes that are not TLS; a handshake cut at every byte; the bounded buffer; the
//! settings' errors.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use super::*;

/// How many pump rounds a test allows before it fails (each moves every byte it can).
const ROUNDS: usize = 1_000;

pub(crate) struct Issued {
    pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

fn issue(name: &str, sans: &[&str], ca: Option<(&Certificate, &KeyPair)>) -> (Issued, Certificate, KeyPair) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = match ca {
        None => {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.self_signed(&key).expect("self-signed")
        }
        Some((issuer, issuer_key)) => params.signed_by(&key, issuer, issuer_key).expect("signed"),
    };
    let issued = Issued { pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().clone(),
                          key_der: key.serialize_der() };
    (issued, cert, key)
}

/// An authority, the server's certificate for "localhost", a client's, and a stranger's (another
/// authority's), their PEM files in a folder of the test's own.
pub(crate) struct Pki {
    dir: PathBuf,
    ca: Issued,
    server: Issued,
    pub(crate) client: Issued,
    stranger: Issued,
}

impl Pki {
    pub(crate) fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!("fetchlat-tls-{}-{}", std::process::id(),
                                                    N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&dir).expect("a folder");
        let (ca, ca_cert, ca_key) = issue("fetchlat test authority", &[], None);
        let (server, _, _) = issue("localhost", &["localhost"], Some((&ca_cert, &ca_key)));
        let (client, _, _) = issue("client-1", &[], Some((&ca_cert, &ca_key)));
        let (_, other_cert, other_key) = issue("another authority", &[], None);
        let (stranger, _, _) = issue("stranger", &[], Some((&other_cert, &other_key)));
        let pki = Self { dir, ca, server, client, stranger };
        for (name, text) in [("ca.pem", &pki.ca.pem), ("server.pem", &pki.server.pem),
                             ("server.key", &pki.server.key_pem), ("client.key", &pki.client.key_pem)] {
            std::fs::write(pki.path(name), text).expect("written");
        }
        pki
    }

    pub(crate) fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    pub(crate) fn server_config(&self, mtls: bool) -> Arc<rustls::ServerConfig> {
        let ca = self.path("ca.pem");
        server_config(&self.path("server.pem"), &self.path("server.key"), mtls.then_some(ca.as_str()))
            .expect("a server config")
    }

    /// A client that trusts the authority, with `cert` as its own certificate if given.
    pub(crate) fn client(&self, cert: Option<&Issued>) -> ClientConnection {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der.clone()).expect("the authority");
        let builder = ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions().expect("versions")
            .with_root_certificates(roots);
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some(c) => builder.with_client_auth_cert(vec![c.der.clone()], PrivateKeyDer::Pkcs8(c.key_der.clone().into()))
                .expect("a client certificate"),
        };
        ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").expect("a name")).expect("a client")
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The core's session on one end of a socketpair, the test's raw end on the other.
struct Link {
    server: TlsSession,
    server_end: UnixStream,
    peer: UnixStream,
    /// the plaintext the server has read so far, and how its reads ended
    got: Vec<u8>,
    outcome: Result<Read1, Failure>,
}

impl Link {
    fn new(config: &Arc<rustls::ServerConfig>) -> Self {
        let (peer, server_end) = UnixStream::pair().expect("a socketpair");
        server_end.set_nonblocking(true).expect("non-blocking");
        peer.set_nonblocking(true).expect("non-blocking");
        Self { server: TlsSession::server(config).expect("a session"), server_end, peer, got: Vec::new(),
               outcome: Ok(Read1::Open) }
    }

    /// `bytes` to the server in writes of `chunk`, the server reading after each.
    fn send_server(&mut self, bytes: &[u8], chunk: usize) {
        for piece in bytes.chunks(chunk.max(1)) {
            self.peer.write_all(piece).expect("written to the server's socket");
            self.serve();
        }
    }

    /// The server reads everything its socket holds, and flushes what it has to say.
    fn serve(&mut self) {
        while self.outcome == Ok(Read1::Open) {
            let before = self.got.len();
            self.outcome = self.server.read(self.server_end.as_raw_fd(), &mut self.got);
            let _ = self.server.flush(self.server_end.as_raw_fd());
            if self.got.len() == before && self.outcome == Ok(Read1::Open) && !self.readable() {
                break;
            }
        }
        let _ = self.server.flush(self.server_end.as_raw_fd());
    }

    fn readable(&self) -> bool {
        let mut probe = [0u8; 1];
        // SAFETY: a one-byte buffer that lives for the call
        let n = unsafe { libc::recv(self.server_end.as_raw_fd(), probe.as_mut_ptr().cast(), 1,
                                    libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        n > 0
    }

    /// Everything the server has written so far.
    fn server_said(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match self.peer.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading the server's bytes: {e}"),
            }
        }
        out
    }

    /// Pumps `client` and the server until neither has anything to say (the client's bytes in
    /// writes of `chunk`); the plaintext the client read.
    fn pump(&mut self, client: &mut ClientConnection, chunk: usize) -> Result<Vec<u8>, rustls::Error> {
        let mut plain = Vec::new();
        for _ in 0..ROUNDS {
            let mut out = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut out).expect("the client's bytes");
            }
            self.send_server(&out, chunk);
            self.serve();
            let back = self.server_said();
            if out.is_empty() && back.is_empty() {
                return Ok(plain);
            }
            let mut rd = back.as_slice();
            while !rd.is_empty() {
                client.read_tls(&mut rd).expect("the server's bytes read");
                let state = client.process_new_packets()?;
                let n = state.plaintext_bytes_to_read();
                let at = plain.len();
                plain.resize(at + n, 0);
                client.reader().read_exact(&mut plain[at..]).expect("the client's plaintext");
            }
        }
        panic!("no quiet after {ROUNDS} rounds");
    }

    /// The server echoes what it read back to the client, in takes bounded by the session.
    fn echo(&mut self) {
        let mut at = 0;
        for _ in 0..ROUNDS {
            if at == self.got.len() {
                break;
            }
            at += self.server.take(&self.got[at..]);
            self.server.flush(self.server_end.as_raw_fd()).expect("flushed");
        }
        assert_eq!(at, self.got.len(), "the session took all of a small echo");
    }
}

#[test]
fn the_handshake_completes_and_bytes_pass_both_ways() {
    let pki = Pki::new();
    let config = pki.server_config(false);
    let mut link = Link::new(&config);
    let mut client = pki.client(None);
    assert!(link.server.handshaking());
    client.writer().write_all(b"\x00\x00\x00\x05hello").expect("plaintext");
    link.pump(&mut client, 1 << 16).expect("the handshake");
    assert!(!link.server.handshaking());
    assert_eq!(link.got, b"\x00\x00\x00\x05hello");
    link.echo();
    let back = link.pump(&mut client, 1 << 16).expect("the echo");
    assert_eq!(back, b"\x00\x00\x00\x05hello");
    assert_eq!(link.server.peer_certificate(), None, "no client certificate asked for");
    // the client's close_notify ends the session as a clean close
    client.send_close_notify();
    link.pump(&mut client, 1 << 16).expect("the close");
    assert_eq!(link.outcome, Ok(Read1::Closed));
}

#[test]
fn the_records_queued_leave_in_one_send_and_a_full_socket_takes_a_prefix() {
    let (mut peer, ours) = UnixStream::pair().expect("a socketpair");
    ours.set_nonblocking(true).expect("non-blocking");
    let records: [&[u8]; 3] = [b"first ", b"", b"second and third"];
    let slices: Vec<std::io::IoSlice<'_>> = records.iter().map(|r| std::io::IoSlice::new(r)).collect();
    let mut fd = Fd(ours.as_raw_fd());
    assert_eq!(fd.write_vectored(&slices).expect("sent"), 22, "every record in one call");
    let mut got = [0u8; 64];
    let n = peer.read(&mut got).expect("read");
    assert_eq!(&got[..n], b"first second and third");
    // a socket that takes less than offered: the call says how much, and that much is what went
    let big = vec![7u8; 1 << 20];
    let slices = [std::io::IoSlice::new(&big), std::io::IoSlice::new(b"tail")];
    let sent = fd.write_vectored(&slices).expect("part sent");
    assert!(0 < sent && sent < big.len(), "{sent}");
    peer.set_nonblocking(true).expect("non-blocking");
    let mut drained = 0;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match peer.read(&mut buf) {
            Ok(n) if n > 0 => {
                assert!(buf[..n].iter().all(|&b| b == 7));
                drained += n;
            }
            _ => break,
        }
    }
    assert_eq!(drained, sent);
    drop(peer);
    let gone = fd.write_vectored(&[std::io::IoSlice::new(b"x")]).expect_err("the peer is gone");
    assert_eq!(gone.kind(), ErrorKind::BrokenPipe);
}

#[test]
fn the_servers_close_reaches_the_client_as_close_notify() {
    let pki = Pki::new();
    let mut link = Link::new(&pki.server_config(false));
    let mut client = pki.client(None);
    link.pump(&mut client, 1 << 16).expect("the handshake");
    link.server.close();
    assert!(link.server.wants_write());
    link.pump(&mut client, 1 << 16).expect("the close_notify");
    let mut rest = [0u8; 8];
    assert_eq!(client.reader().read(&mut rest).expect("a clean end"), 0, "the client read the server's close_notify");
}

#[test]
fn mtls_takes_a_certificate_of_its_authority_and_refuses_none_or_a_strangers() {
    let pki = Pki::new();
    let config = pki.server_config(true);
    // a certificate of the authority: the session opens, the certificate is the client's
    let mut link = Link::new(&config);
    let mut client = pki.client(Some(&pki.client));
    client.writer().write_all(b"ping").expect("plaintext");
    link.pump(&mut client, 1 << 16).expect("the handshake with a certificate");
    assert_eq!(link.got, b"ping");
    assert_eq!(link.server.peer_certificate(), Some(pki.client.der.as_ref()));
    // none, or another authority's: refused during the handshake, with the alert sent
    for cert in [None, Some(&pki.stranger)] {
        let mut link = Link::new(&config);
        let mut client = pki.client(cert);
        client.writer().write_all(b"ping").expect("plaintext");
        let _ = link.pump(&mut client, 1 << 16);
        match &link.outcome {
            Err(Failure::Tls { reason, handshaken }) => {
                assert!(reason.to_lowercase().contains("certificate"), "{reason}");
                assert!(!handshaken);
            }
            other => panic!("a client certificate {:?}: {other:?}", cert.map(|_| "of a stranger")),
        }
        assert!(link.got.is_empty(), "no plaintext from a refused client");
    }
}

#[test]
fn bytes_that_are_not_tls_end_the_session_with_a_reason() {
    let pki = Pki::new();
    let config = pki.server_config(false);
    for garbage in [&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..], &b"\x00\x00\x00\x0e\x00\x12\x00\x03"[..],
                    &[0xffu8; 64][..]] {
        let mut link = Link::new(&config);
        link.send_server(garbage, garbage.len());
        match &link.outcome {
            Err(Failure::Tls { reason, handshaken: false }) => assert!(!reason.is_empty()),
            other => panic!("{garbage:?}: {other:?}"),
        }
        assert!(link.got.is_empty());
    }
}

#[test]
fn a_handshake_cut_at_every_byte_ends_as_a_failed_handshake() {
    let pki = Pki::new();
    let config = pki.server_config(false);
    let mut client = pki.client(None);
    let mut hello = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut hello).expect("the client hello");
    }
    assert!(hello.len() > 100, "a whole client hello: {} bytes", hello.len());
    for cut in 0..hello.len() {
        let mut link = Link::new(&config);
        link.send_server(&hello[..cut], 1 << 16);
        assert_eq!(link.outcome, Ok(Read1::Open), "cut at {cut}: waiting for the rest");
        link.peer.shutdown(std::net::Shutdown::Write).expect("the client's end");
        link.serve();
        match &link.outcome {
            Err(Failure::Tls { handshaken: false, .. }) => {}
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn the_sessions_buffer_is_bounded_and_drains_as_the_client_reads() {
    let pki = Pki::new();
    let mut link = Link::new(&pki.server_config(false));
    let mut client = pki.client(None);
    link.pump(&mut client, 1 << 16).expect("the handshake");
    let big = vec![7u8; 4 * OUT_LIMIT];
    let taken = link.server.take(&big);
    assert!(taken <= OUT_LIMIT && taken > 0, "took {taken}");
    assert_eq!(link.server.take(&big[taken..]), 0, "nothing more while the buffer is full");
    // the client reads: the buffer drains and every byte arrives, in order
    let mut at = taken;
    let mut got = link.pump(&mut client, 1 << 16).expect("the first part");
    for _ in 0..ROUNDS {
        if at == big.len() {
            break;
        }
        at += link.server.take(&big[at..]);
        link.server.flush(link.server_end.as_raw_fd()).expect("flushed");
        got.extend(link.pump(&mut client, 1 << 16).expect("the rest"));
    }
    got.extend(link.pump(&mut client, 1 << 16).expect("the end"));
    assert_eq!(at, big.len());
    assert_eq!(got.len(), big.len());
    assert!(got.iter().all(|&b| b == 7));
}

#[test]
fn unusable_settings_say_which_file_and_why() {
    let pki = Pki::new();
    let missing = pki.path("missing.pem");
    let err = server_config(&missing, &pki.path("server.key"), None).expect_err("refused");
    assert!(err.starts_with("tls_cert / tls_key / tls_client_ca: not usable") && err.contains("missing.pem"), "{err}");
    // a key that is not the certificate's
    std::fs::write(pki.path("other.key"), KeyPair::generate().expect("a key").serialize_pem()).expect("written");
    let err = server_config(&pki.path("server.pem"), &pki.path("other.key"), None).expect_err("refused");
    assert!(err.contains("the certificate and its key"), "{err}");
    // a file with no certificate in it, as the certificate or as the clients' authority
    let err = server_config(&pki.path("server.key"), &pki.path("server.key"), None).expect_err("refused");
    assert!(err.contains("no certificate"), "{err}");
    let err = server_config(&pki.path("server.pem"), &pki.path("server.key"), Some(&pki.path("client.key")))
        .expect_err("refused");
    assert!(err.contains("client.key"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// However the client's bytes are split (handshake and records alike), the server reads the
    /// same plaintext, in order, and its echo comes back whole.
    #[test]
    fn any_split_of_the_clients_bytes_gives_the_same_plaintext(
        chunk in prop_oneof![1usize..8, 8usize..600, Just(1usize << 16)],
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3000), 1..5),
    ) {
        let pki = Pki::new();
        let mut link = Link::new(&pki.server_config(false));
        let mut client = pki.client(None);
        let mut sent = Vec::new();
        for m in &messages {
            client.writer().write_all(m).expect("plaintext");
            sent.extend_from_slice(m);
            link.pump(&mut client, chunk).expect("pumped");
        }
        prop_assert_eq!(&link.got, &sent);
        link.echo();
        let back = link.pump(&mut client, chunk).expect("the echo");
        prop_assert_eq!(back, sent);
    }
}

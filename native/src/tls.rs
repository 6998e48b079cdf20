//! TLS owned by the core from a connection's first byte (rustls, with aws-lc as its
//! cryptography, post-quantum key exchange first): what the relay needs to carry a TLS client's
//! connection, or a TLS connection to a broker, itself.
//! A TLS session cannot move from Python's `ssl` (OpenSSL) to another library halfway through,
//! and this kernel has no kTLS, so a connection the core is to carry must be the core's from its
//! ClientHello on.
//!
//! - `server_config`: the listener's settings from the same PEM files the event loop's road
//!   reads (`proxy/tls.py`'s `server_context`): the certificate chain and its key, and, for
//!   mTLS, the certificate authorities a client's certificate must chain to (then required).
//!   TLS 1.2 and 1.3, as there. A new config (a SIGHUP's reload) serves new connections only.
//! - `client_config`: the brokers' settings from the PEM files `proxy/tls.py`'s `client_context`
//!   reads: the authorities a broker's certificate must chain to, and the proxy's own
//!   certificate and key for mTLS. TLS 1.2 and 1.3, as there.
//! - `TlsSession`: one session over its non-blocking socket, towards a client (`server`) or a
//!   broker (`client`): `read` takes one read of the socket's TLS bytes and gives their
//!   plaintext (`feed` the same of bytes read elsewhere: a broker's, read with their kernel
//!   stamp); `take` accepts plaintext to encrypt (the session's buffer is bounded: `OUT_LIMIT`),
//!   `flush` writes the TLS bytes that wait.
//!
//! Must never: log or return key material or plaintext anywhere but to its caller; block (every
//! socket it is given is non-blocking: EAGAIN is "nothing now"); keep a length the kernel
//! returned without checking it against the buffer it gave.

use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::sync::Arc;

use rustls::crypto::aws_lc_rs::default_provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig, ServerConnection};

/// The TLS bytes and plaintext a session holds for its client at most; past it `take` takes no
/// more, and what waits stays in the caller's queue (back-pressure, as for a plaintext socket).
pub const OUT_LIMIT: usize = 256 << 10;

/// An error's words for the listener's files (`unusable`) or the brokers' (`unusable_upstream`).
type Unusable = fn(&str, &dyn std::fmt::Display) -> String;

fn unusable(what: &str, e: &dyn std::fmt::Display) -> String {
    format!("tls_cert / tls_key / tls_client_ca: not usable ({what}: {e}); give PEM files, the key matching the \
             certificate")
}

/// The certificates of the PEM file `path`, at least one; an error in `unusable`'s words.
fn certificates(path: &str, unusable: Unusable) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| unusable(path, &e))?
        .collect::<Result<Vec<_>, _>>().map_err(|e| unusable(path, &e))?;
    if certs.is_empty() {
        return Err(unusable(path, &"no certificate in it"));
    }
    Ok(certs)
}

/// A listener's TLS settings: `cert` (PEM: the chain, leaf first) and `key` (PEM), and
/// `client_ca` (PEM) to require client certificates that chain to it. The error says which file
/// and why, in the words of the event loop's road.
pub fn server_config(cert: &str, key: &str, client_ca: Option<&str>) -> Result<Arc<ServerConfig>, String> {
    let chain = certificates(cert, unusable)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| unusable(key, &e))?;
    let provider = Arc::new(default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| unusable("protocol versions", &e))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certificates(ca, unusable)? {
                roots.add(c).map_err(|e| unusable(ca, &e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build().map_err(|e| unusable(ca, &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key_der).map_err(|e| unusable("the certificate and its key", &e))?;
    Ok(Arc::new(config))
}

fn unusable_upstream(what: &str, e: &dyn std::fmt::Display) -> String {
    format!("upstream_ca / upstream_cert / upstream_key: not usable ({what}: {e}); give PEM files")
}

/// The brokers' TLS settings: `ca` (PEM: the authorities a broker's certificate must chain to),
/// and `cert` and `key` (PEM) where the proxy shows a certificate of its own (mTLS). The error
/// says which file and why, in the words of the event loop's road.
pub fn client_config(ca: &str, cert: Option<&str>, key: Option<&str>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certificates(ca, unusable_upstream)?);
    if added == 0 {
        return Err(unusable_upstream(ca, &"no certificate authority in it"));
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| unusable_upstream("protocol versions", &e))?
        .with_root_certificates(roots);
    let config = match cert {
        None => builder.with_no_client_auth(),
        Some(cert) => {
            let chain = certificates(cert, unusable_upstream)?;
            let key = key.unwrap_or(cert);
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| unusable_upstream(key, &e))?;
            builder.with_client_auth_cert(chain, key_der)
                .map_err(|e| unusable_upstream("the certificate and its key", &e))?
        }
    };
    Ok(Arc::new(config))
}

/// A socket as `Read` and `Write` for rustls: one `recv`, `send` or `sendmsg` each call, its
/// length checked. rustls hands `write_tls` every record it has queued as one vectored write
/// (a handshake's whole flight, an answer's many records): sent with one `sendmsg`, not one
/// `send` a record, which the default `write_vectored` would make.
pub(crate) struct Fd(pub(crate) RawFd);

impl Read for Fd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: the pointer and length are a live, writable slice's
        let n = unsafe { libc::recv(self.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((n as usize).min(buf.len()))
    }
}

impl Write for Fd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: the pointer and length are a live slice's
        let n = unsafe { libc::send(self.0, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((n as usize).min(buf.len()))
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // at most the slices one sendmsg takes (rustls passes at most 64)
        let bufs = &bufs[..bufs.len().min(libc::UIO_MAXIOV as usize)];
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        // SAFETY: a zeroed msghdr is valid (no name, no control data); `IoSlice` is ABI-compatible
        // with `iovec` on Unix, and the slices outlive the call, which only reads them
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = bufs.len() as _;
            libc::sendmsg(self.0, &msg, libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((n as usize).min(total))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What one `read` found besides plaintext.
#[derive(Debug, PartialEq, Eq)]
pub enum Read1 {
    /// the session goes on (nothing more to read now, or more to come)
    Open,
    /// the client ended its side: its close_notify, or the end of its stream
    Closed,
}

/// Why a session ended on its own.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// the peer's bytes broke TLS (a bad handshake, a refused certificate, bytes that are not
    /// TLS): the reason, and whether the handshake had completed; the alert for the peer waits
    /// in the session (`flush` it before closing)
    Tls { reason: String, handshaken: bool },
    /// the socket failed
    Io(String),
}

impl Failure {
    /// Why the connection ends, in the words the relay queues: a client's session's
    /// (`proxy/policy.py`'s `core_tls_failure` reads the two TLS prefixes), or, with `broker`, a
    /// broker's, whose words begin with "broker" as every end the broker causes.
    pub fn reason(self, broker: bool) -> String {
        let peer = if broker { "broker " } else { "" };
        match self {
            Failure::Tls { reason, handshaken: false } => format!("{peer}tls handshake failed: {reason}"),
            Failure::Tls { reason, handshaken: true } => format!("{peer}tls error: {reason}"),
            Failure::Io(e) => format!("{} read: {e}", if broker { "broker" } else { "client" }),
        }
    }
}

/// One TLS session over its non-blocking socket: towards a client (the core the server) or a
/// broker (the core the client).
pub struct TlsSession {
    conn: Connection,
    closed: bool,
}

impl TlsSession {
    /// A client's session, as the listener's `config` says.
    pub fn server(config: &Arc<ServerConfig>) -> Result<Self, String> {
        let conn = ServerConnection::new(Arc::clone(config)).map_err(|e| format!("tls: {e}"))?;
        Ok(Self::of(Connection::Server(conn)))
    }

    /// A session with a broker, as the brokers' `config` says, whose certificate must name
    /// `server_name` (a DNS name or an IP address).
    pub fn client(config: &Arc<ClientConfig>, server_name: &str) -> Result<Self, String> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| format!("tls: the broker's name {server_name:?}: {e}"))?;
        let conn = ClientConnection::new(Arc::clone(config), name).map_err(|e| format!("tls: {e}"))?;
        Ok(Self::of(Connection::Client(conn)))
    }

    fn of(mut conn: Connection) -> Self {
        conn.set_buffer_limit(Some(OUT_LIMIT));
        Self { conn, closed: false }
    }

    pub fn handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// One read of the socket's TLS bytes (as much as one `recv` gives), processed: the
    /// plaintext they carried is appended to `out` (none while the handshake runs: its answers
    /// wait for `flush`). EAGAIN reads nothing.
    pub fn read(&mut self, fd: RawFd, out: &mut Vec<u8>) -> Result<Read1, Failure> {
        if self.closed {
            return Ok(Read1::Closed);
        }
        let eof = loop {
            match self.conn.read_tls(&mut Fd(fd)) {
                Ok(0) => break true,
                Ok(_) => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Read1::Open),
                Err(e) => return Err(Failure::Io(e.to_string())),
            }
        };
        self.processed(out, eof)
    }

    /// The TLS bytes of one read made by the caller (`data`; empty: the peer's end of stream),
    /// processed as `read` processes its own.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<Read1, Failure> {
        if self.closed {
            return Ok(Read1::Closed);
        }
        if data.is_empty() {
            return self.processed(out, true);
        }
        while !data.is_empty() {
            // rustls takes what its buffer holds; what it took is processed before the rest
            if let Err(e) = self.conn.read_tls(&mut data) {
                return Err(Failure::Io(e.to_string()));
            }
            if self.processed(out, false)? == Read1::Closed {
                return Ok(Read1::Closed);
            }
        }
        Ok(Read1::Open)
    }

    /// What the session's new TLS bytes carried: their plaintext onto `out`; `eof`: the socket's
    /// stream ended after them.
    fn processed(&mut self, out: &mut Vec<u8>, eof: bool) -> Result<Read1, Failure> {
        let handshaken = !self.conn.is_handshaking();
        let state = self.conn.process_new_packets()
            .map_err(|e| Failure::Tls { reason: e.to_string(), handshaken })?;
        let n = state.plaintext_bytes_to_read();
        if n > 0 {
            let at = out.len();
            out.resize(at + n, 0);
            if let Err(e) = self.conn.reader().read_exact(&mut out[at..]) {
                out.truncate(at);
                return Err(Failure::Tls { reason: e.to_string(), handshaken });
            }
        }
        if state.peer_has_closed() || eof {
            self.closed = true;
            if eof && self.conn.is_handshaking() {
                return Err(Failure::Tls { reason: "the peer closed the connection during the handshake".into(),
                                          handshaken: false });
            }
            return Ok(Read1::Closed);
        }
        Ok(Read1::Open)
    }

    /// Takes what it can of `data` to encrypt (bounded by `OUT_LIMIT` with what waits): how
    /// many bytes it took. Before the handshake completes they wait in the session.
    pub fn take(&mut self, data: &[u8]) -> usize {
        self.conn.writer().write(data).unwrap_or(0)
    }

    /// TLS bytes wait for the socket (the handshake's, an alert, encrypted plaintext).
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Writes what waits of the TLS bytes: Ok(true) once nothing waits, Ok(false) when the
    /// socket takes no more now.
    pub fn flush(&mut self, fd: RawFd) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut Fd(fd)) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// The session's end towards its peer: a close_notify waits to be flushed.
    pub fn close(&mut self) {
        self.conn.send_close_notify();
    }

    /// The session's end on the way out: its close_notify, and as much as `fd` takes now.
    pub fn end(&mut self, fd: RawFd) {
        self.close();
        let _ = self.flush(fd);
    }

    /// The client's certificate (DER, leaf first) once the handshake completed with one.
    #[cfg_attr(not(test), allow(dead_code))] // the tests' (a client's certificate is not reported yet)
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        self.conn.peer_certificates().and_then(|c| c.first()).map(|c| c.as_ref())
    }
}

#[cfg(test)]
#[path = "tests/tls.rs"]
pub(crate) mod tests; // its certificates serve the relay's TLS tests too

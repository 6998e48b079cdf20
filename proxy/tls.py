"""TLS contexts from the configuration: the listeners' (server) and the brokers' (client)."""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Callable

from .config import Config, ConfigError

log = logging.getLogger("fetchlat.proxy")


def server_context(cfg: Config) -> ssl.SSLContext | None:
    if not cfg.tls_cert:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
        if cfg.tls_client_ca:
            ctx.load_verify_locations(cfg.tls_client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"tls_cert / tls_key / tls_client_ca: not usable ({exc}); give PEM files, the key "
                          "matching the certificate") from None
    return ctx


def server_files(cfg: Config) -> tuple[str, str, str | None] | None:
    """The listener's PEM files as the native core reads them: the certificate, its key (the
    certificate's file where no key file is named, as ``load_cert_chain`` reads it), the client
    authority; None without TLS."""
    if not cfg.tls_cert:
        return None
    return cfg.tls_cert, cfg.tls_key or cfg.tls_cert, cfg.tls_client_ca or None


def reread_server_tls(cfg: Config, core_config: Callable[[str, str, str | None], None] | None
                      ) -> ssl.SSLContext | None:
    """The listener's certificate, key and client authority read again from their files (a
    rotation writes new ones in place; SIGHUP): the new context for new connections, given to
    the native core too (``core_config``, where it holds TLS clients' sessions); None, the
    current ones staying in use, where the files cannot be read (the log says why)."""
    files = server_files(cfg)
    if files is None:
        return None
    try:
        ctx = server_context(cfg)
    except ConfigError as exc:
        log.warning("TLS certificates not re-read (%s); the current ones stay in use", exc)
        return None
    if core_config is not None:
        try:
            core_config(*files)
        except ValueError as exc:
            log.warning("TLS certificates not re-read (the native core: %s); the current ones stay in use", exc)
            return None
    log.info("TLS certificates re-read from %s: new connections use them", cfg.tls_cert)
    return ctx


def client_context(cfg: Config) -> ssl.SSLContext | None:
    if not cfg.upstream_tls:
        return None
    try:
        ctx = ssl.create_default_context(cafile=cfg.upstream_ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if cfg.upstream_cert:
            ctx.load_cert_chain(cfg.upstream_cert, cfg.upstream_key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"upstream_ca / upstream_cert / upstream_key: not usable ({exc}); give PEM files") from None
    return ctx


class TlsServerSide:
    """TLS towards one client, over memory buffers: the session feeds it the bytes read from
    the socket and writes what it returns, so a failed handshake surfaces here, as an
    exception with its reason, instead of disappearing inside the event loop."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(self._in, self._out, server_side=True)
        self.handshaken = False
        self.closed_by_peer = False

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """(application bytes decrypted, bytes to send back). Raises ssl.SSLError."""
        self._in.write(data)
        if not self.handshaken:
            try:
                self._obj.do_handshake()
                self.handshaken = True
            except ssl.SSLWantReadError:
                return b"", self._out.read()
        chunks = []
        while True:
            try:
                piece = self._obj.read(262144)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                piece = b""
            if not piece:  # close_notify: answer it, the session then closes the connection
                self.closed_by_peer = True
                with contextlib.suppress(ssl.SSLError):  # SSLWantReadError is one
                    self._obj.unwrap()
                break
            chunks.append(piece)
        return b"".join(chunks), self._out.read()

    def encrypt(self, segments: list[bytes | memoryview]) -> bytes:
        for s in segments:
            self._obj.write(s)
        return self._out.read()

    def peer_subject(self) -> str | None:
        cert = self._obj.getpeercert()
        if not cert:
            return None
        for rdn in cert.get("subject", ()):
            for pair in rdn:
                if pair[0] == "commonName":
                    return str(pair[1])
        return None

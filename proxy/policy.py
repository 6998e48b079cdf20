"""What a client connection decides, as a pure object: how much it may hold while its broker
connection comes up, which timeout expired, what its first bytes say, how long to keep trying
an unreachable broker and how long to wait between attempts, and why a TLS session failed.

Every rule is a method that takes the time (monotonic ns) and returns a verdict; table tests
in ``tests/proxy/test_policy.py`` name one row per rule. Must never: read clocks, touch
sockets or asyncio, or log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ..protocol.sniff import sniff

if TYPE_CHECKING:
    from .config import Config

NS: Final = 1_000_000_000
TLS_HANDSHAKE_TIMEOUT_NS: Final = 10 * NS
MAX_PENDING_BYTES: Final = 8 * 1024 * 1024  # client bytes held while the upstream connects
BACKOFF_FIRST_NS: Final = 50_000_000
BACKOFF_MAX_NS: Final = NS
RTT_SAMPLE_EVERY_NS: Final = NS


@dataclass(frozen=True, slots=True)
class Limits:
    idle_ns: int = 600 * NS
    partial_frame_ns: int = 30 * NS
    stalled_client_ns: int = 60 * NS
    upstream_hold_ns: int = 15 * NS
    tls_handshake_ns: int = TLS_HANDSHAKE_TIMEOUT_NS
    max_pending_bytes: int = MAX_PENDING_BYTES

    @classmethod
    def from_config(cls, cfg: Config) -> Limits:
        return cls(idle_ns=int(cfg.idle_timeout_s * NS), partial_frame_ns=int(cfg.partial_frame_timeout_s * NS),
                   stalled_client_ns=int(cfg.stalled_client_timeout_s * NS),
                   upstream_hold_ns=int(cfg.upstream_hold_timeout_s * NS))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Close the connection at once: ``reason`` is the metric label, ``message`` the log line."""

    reason: str
    message: str


SNIFFED: Final = {
    "tls": ("tls_on_plaintext", "a TLS ClientHello"),
    "http": ("http_on_plaintext", "an HTTP request"),
}


def first_bytes_verdict(first: bytes) -> Refusal | None:
    """A non-Kafka peer on a plaintext listener is refused (its bytes never reach the broker)."""
    kind = sniff(first[:8])
    if kind is None:
        return None
    reason, what = SNIFFED[kind]
    return Refusal(reason, f"sent {what} to a plaintext Kafka listener; closing this connection "
                           "(point the client at a PLAINTEXT listener, or use Kafka's protocol)")


def tls_failure(handshaken: bool, error: str) -> Refusal:
    """Why a TLS session failed, with a hint when the peer spoke plaintext to a TLS listener."""
    what = "TLS error" if handshaken else "TLS handshake failed"
    # OpenSSL's words on the event loop's road, rustls' on the core's (relay/front.rs)
    plaintext = any(k in error for k in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL",
                                         "InvalidContentType"))
    hint = " (a plaintext client on a TLS listener?)" if plaintext else ""
    return Refusal("tls_error" if handshaken else "tls_handshake_failed",
                   f"{what}: {error}{hint}; closing this connection")


CORE_TLS_WORDS: Final = (("tls handshake failed: ", False), ("tls error: ", True))  # tls.rs, Failure::reason


def core_tls_failure(reason: str) -> Refusal | None:
    """The refusal a TLS failure the core ended a connection for (``reason``, in its words) makes,
    before its hand-over or after it; None for any other end."""
    for prefix, handshaken in CORE_TLS_WORDS:
        if reason.startswith(prefix):
            return tls_failure(handshaken, reason[len(prefix):])
    return None


class ConnectionPolicy:
    """One client connection's timers and limits."""

    __slots__ = ("_attempt_delay_ns", "connected_ns", "last_active_ns", "limits", "partial_since_ns",
                 "pending_bytes", "stalled_since_ns", "tls_pending", "upstream_deadline_ns")

    def __init__(self, limits: Limits, t_ns: int, *, tls: bool) -> None:
        self.limits = limits
        self.connected_ns = t_ns
        self.last_active_ns = t_ns
        self.partial_since_ns = 0  # a request begun and not finished since then (0: none)
        self.stalled_since_ns = 0  # the client stopped reading responses since then (0: reading)
        self.tls_pending = tls  # a TLS handshake has not completed yet
        self.pending_bytes = 0
        self.upstream_deadline_ns = t_ns + limits.upstream_hold_ns
        self._attempt_delay_ns = BACKOFF_FIRST_NS

    # --------------------------------------------------------------- client activity
    def client_bytes(self, t_ns: int, mid_frame: bool) -> None:
        self.last_active_ns = t_ns
        if not mid_frame:
            self.partial_since_ns = 0
        elif not self.partial_since_ns:
            self.partial_since_ns = t_ns

    def held(self, n_bytes: int) -> bool:
        """``n_bytes`` more are held for the broker; True: pause reading the client."""
        self.pending_bytes += n_bytes
        return self.pending_bytes > self.limits.max_pending_bytes

    def released(self) -> bool:
        """The held bytes went upstream; True if reading the client was paused for them."""
        paused = self.pending_bytes > self.limits.max_pending_bytes
        self.pending_bytes = 0
        return paused

    def client_stalled(self, t_ns: int) -> None:
        self.stalled_since_ns = t_ns

    def client_resumed(self) -> None:
        self.stalled_since_ns = 0

    def expire(self, now_ns: int, in_flight: bool) -> str | None:
        """Why this connection should be closed now, if it should."""
        lim = self.limits
        if self.tls_pending and now_ns - self.connected_ns > lim.tls_handshake_ns:
            return "tls_handshake_timeout"
        if self.partial_since_ns and now_ns - self.partial_since_ns > lim.partial_frame_ns:
            return "partial_frame_timeout"
        if self.stalled_since_ns and now_ns - self.stalled_since_ns > lim.stalled_client_ns:
            return "client_not_reading"
        if not in_flight and now_ns - self.last_active_ns > lim.idle_ns:
            return "idle_timeout"
        return None

    # --------------------------------------------------------------- upstream
    def attempt_timeout_ns(self, now_ns: int, connect_timeout_ns: int) -> int:
        """How long the next connection attempt may take: the connect timeout, within the hold."""
        return max(50_000_000, min(connect_timeout_ns, self.upstream_deadline_ns - now_ns))

    def attempt_failed(self, now_ns: int) -> int | None:
        """A round of attempts failed: ns to wait before the next round, or None to give up
        (the client is closed and reconnects, as it does after any disconnect)."""
        if now_ns >= self.upstream_deadline_ns:
            return None
        delay = min(self._attempt_delay_ns, self.upstream_deadline_ns - now_ns)
        self._attempt_delay_ns = min(self._attempt_delay_ns * 2, BACKOFF_MAX_NS)
        return delay

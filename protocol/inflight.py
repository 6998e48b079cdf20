"""What the two directions of one connection share: the requests awaiting a response (in
order: Kafka answers in request order; Produce with acks=0 gets none), the fetch-session
mirror, and the raw-SASL state a SaslHandshake v0 response switches on.

Owns: which exchanges are decoded for the latency model (``observed``). Must never: do I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from . import apis, fetch, produce, share
from .sessions import Covered, FetchSessions

SASL_TOKEN: Final = -1  # pseudo api key of a raw SASL token exchange
SASL_ROUNDS: Final[dict[str, int]] = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}


def observed(api_key: int, api_version: int) -> bool:
    """Fetch, ShareFetch and Produce exchanges are decoded for the latency model."""
    if api_key == apis.FETCH:
        return fetch.MIN_VERSION <= api_version <= fetch.MAX_VERSION
    if api_key == apis.PRODUCE:
        return produce.MIN_VERSION <= api_version <= produce.MAX_VERSION
    if api_key == apis.SHARE_FETCH:
        return share.MIN_VERSION <= api_version <= share.MAX_VERSION
    return False


@dataclass(slots=True)
class InFlight:
    """A request forwarded upstream whose response has not yet begun."""

    correlation_id: int
    api_key: int
    api_version: int
    client_id: str | None
    t_request_ns: int
    sasl_mechanism: str | None = None
    info: fetch.FetchRequestInfo | produce.ProduceRequestInfo | None = None
    covered: Covered = ()
    request_bytes: int = 0

    def __init__(self, correlation_id: int, api_key: int, api_version: int, client_id: str | None, t_request_ns: int,
                 sasl_mechanism: str | None = None,
                 info: fetch.FetchRequestInfo | produce.ProduceRequestInfo | None = None, covered: Covered = (),
                 request_bytes: int = 0) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id
        self.t_request_ns = t_request_ns
        self.sasl_mechanism = sasl_mechanism
        self.info = info
        self.covered = covered
        self.request_bytes = request_bytes


@dataclass(slots=True)
class Shared:
    in_flight: deque[InFlight] = field(default_factory=deque)
    sessions: FetchSessions = field(default_factory=FetchSessions)
    passthrough: bool = False  # raw SASL of unknown shape: forward blindly, both ways
    sasl_raw_rounds: int = 0  # raw SASL token frames still to come from the client

"""The one vocabulary of what fetchlat measures: the values of the ``outcome``, ``source``
(wait source), ``kind`` and ``direction`` labels and trace columns. The latency model, the
Prometheus families, the trace rows and ``analysis/`` all take them from here (a ``StrEnum``
is its string value in a label, a Parquet column and a Spark literal).

Extend, never rename: the values are a pinned interface (docs/operations.md, docs/traces.md). Must never: import
anything but the standard library (``analysis/`` imports this on Spark's driver).
"""

from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    """How a fetch ended (``estimate_wait`` decides)."""

    IMMEDIATE = "immediate"  # answered without parking
    WOKEN = "woken"  # parked on an empty log, woken by new data
    EXPIRED = "expired"  # parked until max_wait ran out
    ERROR = "error"  # answered with an error (at once)
    UNKNOWN = "unknown"  # not decidable from what was seen: wait 0, low confidence


class WaitSource(enum.StrEnum):
    REPORTED = "reported"  # the broker said (WaitTimeMs, KIP-736)
    INFERRED = "inferred"  # the model's estimate


class Kind(enum.StrEnum):
    """Who sent the request: a consumer or a follower broker fetching, a share-group consumer
    fetching (ShareFetch, KIP-932); a producer."""

    CONSUMER = "consumer"
    FOLLOWER = "follower"
    PRODUCER = "producer"
    SHARE = "share"


class Direction(enum.StrEnum):
    """Which way bytes flow through the proxy (the ``direction`` label of ``fetchlat_bytes_total``)."""

    CLIENT_TO_BROKER = "client_to_broker"
    BROKER_TO_CLIENT = "broker_to_client"


def fetch_kind(replica_id: int, share: bool = False) -> Kind:
    """A fetch with a replica id (>= 0) comes from a follower broker; a ShareFetch from a share
    consumer."""
    if share:
        return Kind.SHARE
    return Kind.FOLLOWER if replica_id >= 0 else Kind.CONSUMER

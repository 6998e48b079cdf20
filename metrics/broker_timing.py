"""When a broker parks a fetch and when it counts the wait over: what the latency model takes,
measured against Apache Kafka 4.4's request log.

The broker's wait (``remoteTimeMs``, what KIP-736's ``WaitTimeMs`` would report) begins once it
has handled the fetch and found too little to answer (after ``requestQueueTimeMs +
localTimeMs``), and ends once the answer is ready: after the wake it reads the log (and, for a
share fetch, acquires the records for the member). A proxy sees neither moment. It sees the
request go out and the answer's first byte come back, and it dates the data that woke the fetch
(``model.py``). The model starts a fetch's wait ``park_ns`` after the request went out (data
that came before then found it not parked yet: ``immediate``), and ends a woken one's
``answer_ns`` before its first byte, never before the data came.

Pure constants, the standard library only: ``verify/`` judges the model's wait against the
broker's by them (``fetchlat verify --parts``). Must never: import anything of fetchlat.
"""

from __future__ import annotations

from typing import Final

# A consumer's fetch parks once the broker has read the log and found too little:
# requestQueueTimeMs + localTimeMs of the woken ones p50 0.34-0.48 ms (six runs: beside the
# broker and a capture of its port, 2026-12-04/05).
CONSUMER_PARK_NS: Final = 400_000
# Kafka completes a parked consumer fetch as the high watermark moves, reads its records and
# only then ends its remoteTimeMs; the first byte came 0.19-0.26 ms (p50) after that (the same
# runs). The data still dates the wake (the outcome, the wake lag,
# ``fetchlat_fetch_wake_lag_seconds``). A broker that notices data late (Tansu re-checks parked
# fetches 50-250 ms late) keeps the fetch parked that long: its wait, as WaitTimeMs would count
# it, and its wake lag. Ending the wait at the data instead left Kafka's woken fetches' true local
# +0.20 to +0.39 ms long and |wait - remoteTimeMs| p99 3.3-16 ms, where the answer gives
# 1.3-3.4 ms: a late answer is mostly the broker's completion running late, inside its wait.
CONSUMER_ANSWER_NS: Final = 200_000
# A follower's fetch parks once the leader has recorded the follower's progress: moved its high
# watermark and completed the acks=all produces the fetch confirms (their answers go out from
# inside it), at a moment the leader is busy with the append the followers just took. Three
# brokers behind their sidecars (2026-12-05, three runs): the woken ones' requestQueueTimeMs +
# localTimeMs p50 0.85 ms (p10 0.34, p90 2.9); dated from the forwarding, their local time came
# out 0.82-1.09 ms short (four runs). (A follower's data is dated by its answer already: ``append_end``.)
FOLLOWER_PARK_NS: Final = 900_000
# A share fetch parks once the broker has done its share-group work on it (the share session,
# trying to acquire): the parked ones' requestQueueTimeMs + localTimeMs p50 0.93-0.98 ms ...
SHARE_PARK_NS: Final = 900_000
# ... and later still when it carries acknowledgements (implicit acknowledgement mode): the
# broker records them first. Woken ones with acknowledgements: p50 1.30-2.09 ms over six runs of
# Kafka's Java share consumer and librdkafka's (2026-12-04; 1.5 the middle).
SHARE_PARK_ACKS_NS: Final = 1_500_000
# A woken share fetch stays parked until the broker has read the log and acquired the records
# for the member: 1.7-2.0 ms (p50) after the produce that fed it was answered (three clients,
# 2026-12-04), and its first byte came 0.26-0.44 ms (p50) after the broker's wait ended.
SHARE_ANSWER_NS: Final = 300_000


def park_ns(kind: str, acknowledgements: bool = False) -> int:
    """How long after its request went out the model takes a fetch of ``kind`` (``Kind``'s
    values) to have parked."""
    if kind == "follower":
        return FOLLOWER_PARK_NS
    if kind == "share":
        return SHARE_PARK_ACKS_NS if acknowledgements else SHARE_PARK_NS
    return CONSUMER_PARK_NS


def answer_ns(kind: str) -> int | None:
    """How long before a woken fetch's first byte the model ends its wait (None: a follower's,
    whose data is dated by its answer already)."""
    if kind == "follower":
        return None
    return SHARE_ANSWER_NS if kind == "share" else CONSUMER_ANSWER_NS

"""What the Spark side of ``fetchlat analyze`` (``transforms``, ``job``) and the driver side
(``finish``) agree on: the keys and columns of the tables, and the log-bucket histograms every
quantile comes from, with how a row's buckets are packed. Plain values: no Spark, no I/O, so the
driver-side code imports without pyspark (tests/analysis/test_tables.py checks it)."""

from __future__ import annotations

from ..metrics.vocabulary import Outcome

PER_MILLE = (500, 900, 990, 999)
QNAMES = ("p50", "p90", "p99", "p999")
PARTS = ("total", "wait", "local", "e2e")
# Quantiles come from log-bucket histograms (DDSketch's mapping): a duration v (ns) counts in
# bucket ``bucket(v)`` = sign(v) * (ceil(ln|v| / ln GAMMA) + 1), 0 for v = 0; a bucket stands for
# 2 GAMMA^(|k|-1) / (GAMMA + 1), which is within ALPHA (relative) of every value in it. A
# quantile is the bucket of the nearest-rank value (rank ceil(q n)), so it is within ALPHA of
# that exact value. Counts are integers: histograms merge by summing, in any order, so one pass
# over the rows serves every coarser table, and any partitioning (local[*], any cluster) gives
# the same tables to the last bit.
ALPHA = 0.01
GAMMA = (1 + ALPHA) / (1 - ALPHA)
FINE_KEYS = ("window_start", "broker", "api", "kind", "client_id", "replica_id", "acks")
COARSE_KEYS = ("window_start", "broker", "api", "kind", "replica_id", "acks")  # FINE_KEYS but the client
OUTCOMES = tuple(o.value for o in Outcome)  # the order encodes outcome as a number in the one pass
STATS = ("requests", "records", *OUTCOMES, "with_records", "wait_sum_ns", "total_sum_ns")

FETCH_APIS = ("Fetch", "ShareFetch")

# A row's four buckets travel in the per-client lists as one long: part i's bucket + STORED in bits
# [BUCKET_BITS i, BUCKET_BITS (i + 1)), 0 where the row has no value of that part (|bucket| <= 2 186
# for any duration a long holds, so a stored bucket is never 0). One list per group instead of one
# per part: Spark's collect_list keeps an object per element, and four lists made the pass 1.8x as
# long at 10 M rows (26.9 s against 18.9 s with one).
BUCKET_BITS = 15
STORED = 1 << (BUCKET_BITS - 1)
BUCKET_MASK = (1 << BUCKET_BITS) - 1

STAT_COLS = (*STATS, "total_max_ns")

STATS_PART = -1  # a histogram table's row of part -1 carries its group's STAT_COLS (bucket, n null)


# Every per-hour product (``analysis/state.py``) carries its hour: epoch hours, UTC, in integers
# (a double division of ts_ns could put a row a few hundred ns from the hour in the wrong one).
HOUR_NS = 3_600_000_000_000

RECORD_KEYS = ["topic", "partition", "client_id"]
REPLICATION_KEYS = ["broker", "follower"]

ORDER = {
    "latency_by_window": ("window_start", "broker", "kind", "client_id"),
    "summary": ("broker", "kind"),
    "outcome_mix": ("window_start", "broker", "kind"),
    "pair_latency": ("leader", "follower", "window_start"),
    "record_latency": ("topic", "partition", "client_id"),
    "produce_latency": ("broker", "acks"),
    "replication_latency": ("broker", "follower"),
    "timeline": ("window_start", "kind"),
    "broker_timeline": ("window_start", "broker", "kind"),
}

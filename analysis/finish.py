"""The per-hour products and the tables, made in the driver (pure: pyarrow and numpy, no session,
no paths, no Spark: it imports without pyspark).

Spark groups: the one pass (per client x window, the sums and the list of the rows' buckets) and
the record-latency and replication states (``transforms.py``), brought to the driver as Arrow
(``job.py``). The driver reads the lists (``from_fine``): each fetch row's quantiles (latency by
window), the histograms merged over clients and from them the per-window tables and the hourly
histograms (``from_brokers``), and the per-client true-local histograms. Those are the products
kept per hour (``state.py``). From the products of every hour it merges histograms and bucket
lists, reads nearest-rank quantiles, flags pairs and picks the top N. A quantile is a sort and a
pick here, where Spark needed an object per list element or a lambda interpreted element by
element (three times the time at 10 M rows); and a run that reuses kept hours needs no Spark job
to finish its tables. Every run, with or without kept hours, on ``local[*]`` or a cluster,
finishes its tables by this code from the same products, so their tables agree to the last bit.

Quantiles follow the histogram rule of ``tables.py``: the bucket of the nearest-rank value (rank
ceil(q n), in integers), stated in ms by what the bucket stands for (``bucket_ms``: the one
place that says it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..metrics.vocabulary import Kind
from . import tables as tb

HOUR = "hour"


def concat(tables: Sequence[pa.Table]) -> pa.Table:
    """The hours' products as one table (the first one's schema; kept ones are cast to it)."""
    first = tables[0]
    return pa.concat_tables([first, *[t.select(first.column_names).cast(first.schema) for t in tables[1:]]])


def latency_by_window(product: pa.Table) -> pa.Table:
    """Latency by window from its products: the quantiles, kept as buckets, stated in ms."""
    t = per_window(product)
    for i, name in enumerate(t.column_names):
        if name.split("_")[0] in tb.PARTS and name.rsplit("_", 1)[-1] in tb.QNAMES:
            k = t[name].combine_chunks()
            values = pc.fill_null(k, 0).to_numpy(zero_copy_only=False)
            t = t.set_column(i, name, pa.array(bucket_ms(values), mask=pc.is_null(k).to_numpy(zero_copy_only=False)))
    return t


def per_window(product: pa.Table) -> pa.Table:
    """A per-window table from its products: a window lies in one hour, so the hours' rows are the table's."""
    return product.drop_columns([HOUR]) if HOUR in product.column_names else product


# -- grouping ------------------------------------------------------------------------------------


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    """Equal values (nulls equal to each other) get equal small numbers; and how many there are."""
    enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    return codes, len(enc.dictionary) + 1


def groups(t: pa.Table, keys: Sequence[str]) -> tuple[np.ndarray, int, np.ndarray]:
    """Per row, the number of its group of ``keys`` (0..n-1); how many groups; and a row of each group.
    The keys' codes make one number per row (a key's code times the cardinalities after it), made
    dense only when the next key would overflow it: one sort for all the keys, not one per key."""
    key = np.zeros(t.num_rows, np.int64)
    span = 1
    for k in keys:
        codes, card = _codes(t[k])
        if span * card >= 2**62:
            _, key = np.unique(key, return_inverse=True)  # kept dense: never overflows
            key = key.reshape(-1).astype(np.int64)
            span = int(key.max()) + 1 if t.num_rows else 1
        key = key * card + codes
        span *= card
    seen, inverse = np.unique(key, return_inverse=True)
    gid = inverse.reshape(-1).astype(np.int64)
    n = len(seen)  # the keys seen, which gid indexes (numpy 2.5's stubs give an intp array no max() without arguments)
    first = np.zeros(n, np.int64)
    first[gid[::-1]] = np.arange(t.num_rows, dtype=np.int64)[::-1]  # the group's first row
    return gid, n, first


def _sum(gid: np.ndarray, n: int, values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per group, the exact (integer) sum of ``values`` (nulls count nothing)."""
    v = pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    out = np.zeros(n, np.int64)
    np.add.at(out, gid, v)
    return out


def _max(gid: np.ndarray, n: int, values: pa.ChunkedArray | pa.Array, *, lowest: bool = False) -> pa.Array:
    """Per group, the max (or min) of ``values``, null where the group has none."""
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
    v = pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    fill = np.iinfo(np.int64).max if lowest else np.iinfo(np.int64).min
    out = np.full(n, fill, np.int64)
    (np.minimum if lowest else np.maximum).at(out, gid[valid], v[valid])
    return pa.array(out, mask=out == fill)


def keys_of(t: pa.Table, keys: Sequence[str], first: np.ndarray) -> dict[str, pa.Array]:
    return {k: t[k].take(pa.array(first)).combine_chunks() for k in keys}


# -- quantiles -------------------------------------------------------------------------------------


def rank(n: np.ndarray, per_mille: int) -> np.ndarray:
    """The nearest rank, ceil(n q), in integers."""
    return np.maximum(1, (n.astype(np.int64) * per_mille + 999) // 1000)


def bucket_ms(k: np.ndarray) -> np.ndarray:
    """What bucket ``k`` stands for, in ms: 2 GAMMA^(|k|-1) / (GAMMA + 1), signed (``transforms.bucket``'s
    inverse; the only place a table's ms are said)."""
    k = k.astype(np.float64)
    v = 2 * np.power(tb.GAMMA, np.abs(k) - 1) / (tb.GAMMA + 1) / 1e6
    return np.where(k == 0, 0.0, np.sign(k) * v)


def hist_quantiles(gid: np.ndarray, n_groups: int, bucket: np.ndarray, count: np.ndarray | None,
                   per_mille: Sequence[int] = tb.PER_MILLE) -> tuple[list[np.ndarray], np.ndarray]:
    """Per group, the buckets of the nearest-rank values at ``per_mille`` of a histogram given as
    rows (group, bucket, count; a bucket may repeat; ``count`` None: one each, a list of values),
    and a mask of the groups that had none. The rows are put in order of group, then bucket; a
    list's value of rank r is then simply the group's r-th, a histogram's the row where the
    running count reaches r."""
    weights = None if count is None else count.astype(np.float64)  # exact: counts stay far below 2^53
    total = np.bincount(gid, weights=weights, minlength=n_groups).astype(np.int64)
    before = np.concatenate(([0], np.cumsum(total)))[:-1]
    empty = total == 0
    if not len(bucket):
        return [np.zeros(n_groups, np.int64) for _ in per_mille], empty
    last = len(bucket) - 1
    ordered = _by_group_then_bucket(gid, n_groups, bucket, count)
    if count is None:
        value_at, _ = ordered
        return [value_at(np.minimum(before + rank(total, q) - 1, last)) for q in per_mille], empty
    value_at, c = ordered
    cum = np.cumsum(c)
    return [value_at(np.minimum(np.searchsorted(cum, before + rank(total, q), side="left"), last))
            for q in per_mille], empty


def _by_group_then_bucket(gid: np.ndarray, n_groups: int, bucket: np.ndarray, count: np.ndarray | None
                          ) -> tuple[Callable[[np.ndarray], np.ndarray], np.ndarray]:
    """The rows ordered by group, then bucket: what gives the bucket at given positions, and the
    counts in that order (``count`` None: not needed). One sort of one number, group x span + bucket
    (buckets lie a few thousand apart at most, so it fits a long), of the numbers alone where there
    are no counts to carry along; the bucket is read back only where a quantile picks it."""
    keyed = _group_bucket_key(gid, n_groups, bucket)
    if keyed is None:
        order = np.lexsort((bucket, gid))
        by = bucket[order]
        return (lambda at: by[at]), (np.empty(0) if count is None else count[order])
    key, low, span = keyed
    if count is None:
        key.sort()
        return (lambda at: key[at] % span + low), np.empty(0)
    order = np.argsort(key)
    b = bucket[order]
    return (lambda at: b[at]), count[order].astype(np.int64)


def _group_bucket_key(gid: np.ndarray, n_groups: int, bucket: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """One number per (group, bucket) row, group x span + (bucket - low), in the order of group, then
    bucket; with low and span. None where it would not fit a long: never for buckets of durations
    (they lie a few thousand apart at most), but the callers stay correct anyway."""
    low = int(bucket.min())
    span = int(bucket.max()) - low + 1
    if n_groups * span >= 2**62:
        return None
    return gid * span + (bucket - low), low, span


def _ms(buckets: np.ndarray, empty: np.ndarray) -> pa.Array:
    return pa.array(bucket_ms(buckets), mask=empty)


# -- the tables that merge over hours --------------------------------------------------------------


def _quantile_table(hist: pa.Table, keys: Sequence[str], parts: Sequence[str]) -> pa.Table:
    """Per ``keys``, from histogram rows (``hourly``: keys, part, bucket, n, and a STATS_PART row
    of sums per group): the sums of STATS, ``total_max_ms`` and ``{part}_{q}`` in ms for
    ``parts`` (the total's clamped to the group's max: a bucket's value may lie above it)."""
    gid, n, first = groups(hist, keys)  # every group has its STATS_PART row; other rows' sums are null
    cols: dict[str, pa.Array] = keys_of(hist, keys, first)
    for c in tb.STATS:
        cols["fetches" if c == "requests" else c] = pa.array(_sum(gid, n, hist[c]))
    max_ms = pc.divide(pc.cast(_max(gid, n, hist["total_max_ns"]), pa.float64()), 1e6)
    cols["total_max_ms"] = max_ms
    part = hist["part"].to_numpy()
    bucket = pc.fill_null(hist["bucket"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
    count = pc.fill_null(hist["n"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
    for p in parts:
        sel = part == tb.PARTS.index(p)
        ks, empty = hist_quantiles(gid[sel], n, bucket[sel], count[sel])
        for k, name in zip(ks, tb.QNAMES, strict=True):
            v = _ms(k, empty)
            cols[f"{p}_{name}"] = pc.min_element_wise(v, max_ms) if p == "total" else v
    return pa.table(cols)


def _fetch_rows(hourly: pa.Table, api: str) -> pa.Table:
    return hourly.filter(pc.equal(hourly["api"], api))


LATENCY_COLS = ["fetches", *[f"{p}_{q}" for p in tb.PARTS for q in tb.QNAMES]]


# -- what the driver makes of Spark's per-client lists ------------------------------------------

HOUR_US = tb.HOUR_NS // 1000
FETCH_KEYS = ["window_start", "broker", "kind", "client_id", "replica_id"]


def unpack(values: np.ndarray, part: int) -> tuple[np.ndarray, np.ndarray]:
    """Part ``part``'s buckets of packed list values (``transforms.packed_buckets``), and a mask of
    the values that have one."""
    stored = (values >> (tb.BUCKET_BITS * part)) & tb.BUCKET_MASK
    has = stored != 0
    return stored - tb.STORED, has


def counts(gid: np.ndarray, n_groups: int, bucket: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A histogram of (group, bucket) pairs: each distinct pair's group, bucket and count."""
    if not len(bucket):
        return gid, bucket, np.zeros(0, np.int64)
    keyed = _group_bucket_key(gid, n_groups, bucket)
    if keyed is None:
        pairs, c = np.unique(np.stack((gid, bucket), axis=1), axis=0, return_counts=True)
        return pairs[:, 0], pairs[:, 1], c.astype(np.int64)
    key, low, span = keyed
    if n_groups * span <= max(4 * len(key), 1 << 20):  # dense enough to count in place: no sort
        c = np.bincount(key, minlength=n_groups * span)
        key = np.flatnonzero(c)
        c = c[key]
    else:
        key, c = np.unique(key, return_counts=True)
    return key // span, key % span + low, c.astype(np.int64)


def hours_of(windows: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Epoch hours (UTC) of window starts, in integers."""
    us = pc.cast(windows, pa.timestamp("us", "UTC")).cast(pa.int64())
    return pc.divide(us, HOUR_US)  # integer division of non-negative integers


def from_fine(fine: pa.Table) -> dict[str, pa.Table]:
    """The per-hour products (``state.PRODUCTS`` but the record-latency and replication states) from
    Spark's one pass (``transforms.fine``: a row per window x broker x api x kind x client x replica
    x acks, with its rows' buckets packed in ``_v``), for any set of whole windows:
    latency by window (each fetch row's quantiles, as buckets), the per-window tables and the hourly
    histograms (``from_brokers``, from the histograms merged over clients), and the per-client
    true-local histograms. Each list is read once: a part is a shift and a mask, a group's
    quantiles one sort of (row, bucket) numbers, a merged histogram a count of them."""
    fine = fine.append_column(HOUR, hours_of(fine["window_start"]))
    n = fine.num_rows
    lists = fine["_v"].combine_chunks()
    values = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    owner = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    fetch = pc.equal(fine["api"], "Fetch").to_numpy(zero_copy_only=False)
    coarse, n_coarse, coarse_first = groups(fine, [*tb.COARSE_KEYS, HOUR])
    client_keys = ["client_id", "kind", HOUR]
    fetches = fine.filter(pa.array(fetch))
    client, n_clients, client_first = groups(fetches, client_keys)
    client_of = np.full(n, -1, np.int64)
    client_of[fetch] = client
    by_window: dict[str, pa.Array] = {c: fetches[c] for c in FETCH_KEYS}
    by_window["fetches"] = fetches["requests"]
    hist: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
    client_hist = (np.zeros(0, np.int64),) * 3
    for i, p in enumerate(tb.PARTS):
        bucket, has = unpack(values, i)
        row, bucket = owner[has], bucket[has]
        ks, empty = hist_quantiles(row, n, bucket, None)
        for k, name in zip(ks, tb.QNAMES, strict=True):
            by_window[f"{p}_{name}"] = pa.array(k[fetch].astype(np.int16), mask=empty[fetch])
        hist.append((i, *counts(coarse[row], n_coarse, bucket)))
        if p == "local":
            of_fetch = fetch[row]
            client_hist = counts(client_of[row[of_fetch]], n_clients, bucket[of_fetch])
    by_window[HOUR] = fetches[HOUR]
    lbw = pa.table(by_window)
    at = lbw.schema.get_field_index("fetches")
    lbw = lbw.cast(lbw.schema.set(at, lbw.schema.field(at).with_nullable(False)))  # a count, as Spark's
    return {"latency_by_window": lbw,
            **from_brokers(_brokers(fine, coarse, n_coarse, coarse_first, hist)),
            "clients": _clients(fetches, client, n_clients, client_first, client_hist)}


def _brokers(fine: pa.Table, coarse: np.ndarray, n_coarse: int, first: np.ndarray,
             hist: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]) -> pa.Table:
    """The histograms merged over clients (what ``from_brokers`` reads): per COARSE_KEYS x hour x
    part x bucket the count ``n``, and per COARSE_KEYS x hour a STATS_PART row of sums."""
    keys = [*tb.COARSE_KEYS, HOUR]
    stats = keys_of(fine, keys, first)
    stats["part"] = pa.array(np.full(n_coarse, tb.STATS_PART, np.int32))
    stats["bucket"] = pa.nulls(n_coarse, pa.int32())
    stats["n"] = pa.nulls(n_coarse, pa.int64())
    for c in tb.STATS:
        stats[c] = pa.array(_sum(coarse, n_coarse, fine[c]))
    stats["total_max_ns"] = _max(coarse, n_coarse, fine["total_max_ns"])
    tables = [pa.table(stats)]
    for part, gid, bucket, count in hist:
        cols = keys_of(fine, keys, first[gid])
        cols["part"] = pa.array(np.full(len(gid), part, np.int32))
        cols["bucket"] = pa.array(bucket.astype(np.int32))
        cols["n"] = pa.array(count)
        for c in tb.STAT_COLS:
            cols[c] = pa.nulls(len(gid), pa.int64())
        tables.append(pa.table(cols).cast(tables[0].schema))
    return pa.concat_tables(tables)


def _clients(fetches: pa.Table, client: np.ndarray, n_clients: int, first: np.ndarray,
             hist: tuple[np.ndarray, np.ndarray, np.ndarray]) -> pa.Table:
    """Per client x kind x hour: the count ``n`` of each true-local bucket, and a row with a null
    bucket whose ``n`` is the client's fetches. Hours merge by summing."""
    keys = ["client_id", "kind", HOUR]
    gid, bucket, count = hist
    totals = keys_of(fetches, keys, first)
    totals["bucket"] = pa.nulls(n_clients, pa.int32())
    totals["n"] = pa.array(_sum(client, n_clients, fetches["requests"]))
    cols = keys_of(fetches, keys, first[gid])
    cols["bucket"] = pa.array(bucket.astype(np.int32))
    cols["n"] = pa.array(count)
    return pa.concat_tables([pa.table(totals), pa.table(cols)])


# -- the per-hour products made from the histograms merged over clients ---------------------------


def from_brokers(brokers: pa.Table) -> dict[str, pa.Table]:
    """The per-window products (the tables as they are: a window lies in one hour) and the hourly
    histograms, from the histograms merged over clients (``_brokers``: keys, hour, part, bucket, n,
    and a STATS_PART row of sums per group). Whole windows, of one hour or several: every key
    carries its hour."""
    fetches = _fetch_rows(brokers, "Fetch")
    broker_keys = ["window_start", "broker", "kind", HOUR]
    per_broker = _quantile_table(fetches, broker_keys, ("total", "local", "wait"))
    mix = per_broker.select([*broker_keys[:3], "fetches", *tb.OUTCOMES, "with_records"])
    requests = per_broker["fetches"].to_numpy(zero_copy_only=False).astype(np.float64)
    wait, total = (per_broker[c].to_numpy(zero_copy_only=False).astype(np.float64)
                   for c in ("wait_sum_ns", "total_sum_ns"))
    with np.errstate(divide="ignore", invalid="ignore"):
        mix = mix.append_column("data_efficiency", pa.array(
            per_broker["with_records"].to_numpy(zero_copy_only=False) / requests)).append_column(
            "wait_share", pa.array(wait / total, mask=~(total > 0)))
    followers = fetches.filter(pc.equal(fetches["kind"], Kind.FOLLOWER.value))
    pairs = _quantile_table(followers, ["window_start", "broker", "replica_id", HOUR], ("local",))
    timeline = _quantile_table(fetches, ["window_start", "kind", HOUR], ("total", "local", "wait"))
    return {
        "outcome_mix": mix.append_column(HOUR, per_broker[HOUR]),
        "pair_latency": pa.table({"window_start": pairs["window_start"], "leader": pairs["broker"],
                                  "follower": pairs["replica_id"], "fetches": pairs["fetches"],
                                  "local_p50": pairs["local_p50"], "local_p99": pairs["local_p99"],
                                  HOUR: pairs[HOUR]}),
        "timeline": timeline.select(["window_start", "kind", "total_p50", "local_p50", "wait_p50", "fetches", HOUR]),
        "broker_timeline": per_broker.select([*broker_keys[:3], "fetches", *[f"{p}_{n}" for p in (
            "total", "local", "wait") for n in ("p50", "p99")], HOUR]),
        "hourly": hourly(brokers),
    }


HOURLY_KEYS = ["api", "broker", "kind", "acks", HOUR]  # what summary (api, broker, kind) and produce latency group


def hourly(brokers: pa.Table) -> pa.Table:
    """The histograms per hour instead of per window (window and replica dropped): what summary
    and produce latency merge over hours, 60 times fewer rows than the per-window ones at 1m."""
    keys = [*HOURLY_KEYS, "part", "bucket"]
    gid, n, first = groups(brokers, keys)
    cols: dict[str, pa.Array] = keys_of(brokers, keys, first)
    stats_row = pc.equal(cols["part"], tb.STATS_PART)
    cols["n"] = pa.array(_sum(gid, n, brokers["n"]), mask=stats_row.to_numpy(zero_copy_only=False))
    counts_row = pc.invert(stats_row).to_numpy(zero_copy_only=False)
    for c in tb.STATS:
        cols[c] = pa.array(_sum(gid, n, brokers[c]), mask=counts_row)
    cols["total_max_ns"] = _max(gid, n, brokers["total_max_ns"])
    return pa.table(cols)


def summary(hourly: pa.Table) -> pa.Table:
    """The headline: per broker x kind over the whole range, from the hourly histograms."""
    keys = ["broker", "kind"]
    return _quantile_table(_fetch_rows(hourly, "Fetch"), keys, tb.PARTS).select([*keys, *LATENCY_COLS])


def produce_latency(hourly: pa.Table) -> pa.Table:
    q = _quantile_table(_fetch_rows(hourly, "Produce"), ["broker", "acks"], ("total",))
    return pa.table({"broker": q["broker"], "acks": q["acks"], "requests": q["fetches"], "records": q["records"],
                     "p50_ms": q["total_p50"], "p99_ms": q["total_p99"], "max_ms": q["total_max_ms"]})


def duration_table(state: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Per ``keys``, over every hour of a duration state (``transforms.duration_state``): ``samples``,
    p50/p99 in ms (from the buckets, kept within the group's min and max), ``max_ms``, ``avg_ms``
    and, where the state counted them, ``sla_breaches``."""
    gid, n, first = groups(state, keys)
    cols: dict[str, pa.Array] = keys_of(state, keys, first)
    samples = _sum(gid, n, state["samples"])
    cols["samples"] = pa.array(samples)
    lists = state["_b"].combine_chunks()
    values = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    owner = gid[pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)]
    ks, empty = hist_quantiles(owner, n, values, None, (500, 990))
    max_ns, min_ns = _max(gid, n, state["max_ns"]), _max(gid, n, state["min_ns"], lowest=True)
    max_ms = pc.divide(pc.cast(max_ns, pa.float64()), 1e6)
    min_ms = pc.divide(pc.cast(min_ns, pa.float64()), 1e6)
    for k, name in zip(ks, ("p50_ms", "p99_ms"), strict=True):
        cols[name] = pc.min_element_wise(pc.max_element_wise(_ms(k, empty), min_ms), max_ms)
    cols["max_ms"] = max_ms
    cols["avg_ms"] = pa.array(_sum(gid, n, state["sum_ns"]).astype(np.float64) / samples / 1e6)
    if "sla" in state.column_names:
        cols["sla_breaches"] = pa.array(_sum(gid, n, state["sla"]))
    return pa.table(cols)


def record_latency(records: pa.Table) -> pa.Table:
    """KIP-489 record latency per topic x partition x client, with SLA breaches."""
    return duration_table(records, tb.RECORD_KEYS)


def replication_latency(replication: pa.Table) -> pa.Table:
    """Per leader x follower."""
    return duration_table(replication, tb.REPLICATION_KEYS).drop_columns(["avg_ms"])


def slowest_clients(clients: pa.Table, top: int) -> pa.Table:
    """The ``top`` clients of the highest true local p99 over the range, from the per-client
    true-local histograms (a null bucket's row carries the client's fetches)."""
    keys = ["client_id", "kind"]
    gid, n, first = groups(clients, keys)
    cols: dict[str, pa.Array] = keys_of(clients, keys, first)
    counted = pc.is_valid(clients["bucket"]).to_numpy(zero_copy_only=False)
    count = pc.fill_null(clients["n"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
    fetches = np.zeros(n, np.int64)
    np.add.at(fetches, gid[~counted], count[~counted])
    cols["fetches"] = pa.array(fetches)
    bucket = pc.fill_null(clients["bucket"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
    (p50, p99), empty = hist_quantiles(gid[counted], n, bucket[counted], count[counted], (500, 990))
    cols["local_p99"], cols["local_p50"] = _ms(p99, empty), _ms(p50, empty)
    t = pa.table(cols)
    return t.sort_by([("local_p99", "descending"), ("client_id", "ascending"), ("kind", "ascending")]).slice(0, top)


def slowest_partitions(record_lat: pa.Table, top: int) -> pa.Table:
    order = [("p99_ms", "descending"), ("topic", "ascending"), ("partition", "ascending"), ("client_id", "ascending")]
    return record_lat.sort_by(order).slice(0, top)


def flag_shifts(pairs: pa.Table, *, factor: float = 2.0, min_delta_ms: float = 5.0) -> pa.Table:
    """Change detection per broker pair: a window is flagged when its median is more than
    ``factor`` times the pair's baseline and at least ``min_delta_ms`` above it. The baseline is
    the median of the pair's window medians (the lower one, rank ceil(n / 2): what Spark's
    percentile_approx gives for fewer than 5 000 windows), which a few bad windows cannot move."""
    gid, n, _ = groups(pairs, ["leader", "follower"])
    p50 = pairs["local_p50"]
    valid = pc.is_valid(p50).to_numpy(zero_copy_only=False)
    v = pc.fill_null(p50, 0.0).to_numpy(zero_copy_only=False).astype(np.float64)
    g, vv = gid[valid], v[valid]
    order = np.lexsort((vv, g))
    g, vv = g[order], vv[order]
    total = np.bincount(g, minlength=n).astype(np.int64)
    start = np.concatenate(([0], np.cumsum(total)))[:-1]
    idx = np.minimum(start + rank(total, 500) - 1, max(len(vv) - 1, 0))
    base = vv[idx] if len(vv) else np.zeros(n)
    baseline = pa.array(base[gid], mask=(total == 0)[gid])
    shift = pc.subtract(p50, baseline)
    flagged = pc.and_(pc.greater(p50, pc.multiply(baseline, factor)), pc.greater_equal(shift, min_delta_ms))
    return pairs.append_column("baseline_ms", baseline).append_column("shift_ms", shift).append_column(
        "flagged", flagged)


def tables(products: dict[str, pa.Table], top: int) -> dict[str, pa.Table]:
    """Every table, from the products of every hour (each product one table, hours concatenated)."""
    rec = record_latency(products["records"])
    return {
        "latency_by_window": latency_by_window(products["latency_by_window"]),
        "summary": summary(products["hourly"]),
        "outcome_mix": per_window(products["outcome_mix"]),
        "pair_latency": flag_shifts(per_window(products["pair_latency"])),
        "record_latency": rec,
        "produce_latency": produce_latency(products["hourly"]),
        "replication_latency": replication_latency(products["replication"]),
        "slowest_clients": slowest_clients(products["clients"], top),
        "slowest_partitions": slowest_partitions(rec, top),
        "timeline": per_window(products["timeline"]),
        "broker_timeline": per_window(products["broker_timeline"]),
    }

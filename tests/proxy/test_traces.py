"""The trace writer: pinned schema, whole files only (temporary names renamed when closed),
rotation, a clock pair per file, rows handed over in batches of columns (never one by one), and
a full queue dropping (and counting) instead of blocking."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fetchlat import native
from fetchlat.metrics import trace_layout
from fetchlat.metrics.model import FetchSample, PartitionSample
from fetchlat.metrics.trace_schema import EXCHANGES, META_CLOCK, PARTITIONS
from fetchlat.metrics.vocabulary import Kind, Outcome, WaitSource
from fetchlat.protocol.events import FetchExchanged
from fetchlat.proxy import traces
from fetchlat.proxy.traces import TraceWriter

from testkit.events import fetch_ev

PINNED = ["ts_ns", "proxy_id", "conn_id", "client_id", "broker", "api", "api_version", "kind", "max_wait_ms",
          "min_bytes", "response_bytes", "error_code", "total_ns", "wait_ns", "wait_source", "local_ns", "e2e_ns",
          "outcome"]


def sample() -> tuple[FetchExchanged, FetchSample]:
    ev = fetch_ev(1_000, 2_000, 3_000, records=2, hw=2)
    s = FetchSample(kind=Kind.CONSUMER, replica_id=-1, client_id="c", api_version=12, max_wait_ms=500, min_bytes=1,
                    request_bytes=80, response_bytes=300, records=2, error_code=0, throttle_ms=0, total_ns=2_000,
                    first_byte_ns=1_000, transfer_ns=1_000, wait_ns=0, wait_source=WaitSource.INFERRED,
                    outcome=Outcome.IMMEDIATE,
                    basis="known_log_end", confident=True, local_ns=2_000, e2e_ns=2_100, wake_lag_ns=None,
                    partitions=(PartitionSample(topic="t", partition=0, fetch_offset=0, high_watermark=2,
                                                error_code=0, records=2, bytes=200, record_latency_ns=5),))
    return ev, s


def put_fetch(w: TraceWriter, broker: str, conn_id: int, ev: FetchExchanged, s: FetchSample) -> None:
    w.columns.fetch(ev.t_request_ns + 1_700_000_000 * 10**9, w.proxy_id, broker, conn_id, ev.correlation_id, s, [])


def hand_over_aged(w: TraceWriter) -> None:
    """The rows gathered go over as the proxy's tick sends them once the first has waited the
    writer's hold: dated that long ago, so the writer writes them at once."""
    w.columns.batch.first_ns = time.monotonic_ns() - w.hold_ns
    w.columns.flush()


def test_pinned_exchange_columns_exist_in_order() -> None:
    assert EXCHANGES.names[: len(PINNED)] == PINNED
    assert "topic" in PARTITIONS.names and "record_latency_ns" in PARTITIONS.names


def ten_rows(directory: Path) -> TraceWriter:
    """A writer that wrote ten fetches (and their partitions) and closed."""
    w = TraceWriter(str(directory), proxy_id="p1")
    w.start()
    ev, s = sample()
    for _ in range(10):
        put_fetch(w, "111", 7, ev, s)
    w.close()
    return w


def test_rows_land_in_whole_files_with_a_clock_pair(tmp_path: Path) -> None:
    ten_rows(tmp_path)
    files = sorted(tmp_path.rglob("*"))
    assert not [f for f in files if f.name.startswith(".tmp-")]
    ex = pq.read_table(next((tmp_path / "exchanges").rglob("*.parquet")))
    assert ex.num_rows == 10 and ex.schema.remove_metadata() == EXCHANGES
    row = ex.slice(0, 1).to_pylist()[0]
    assert (row["proxy_id"], row["conn_id"], row["broker"], row["outcome"], row["e2e_ns"]) == (
        "p1", 7, "111", "immediate", 2_100)
    clock = json.loads(ex.schema.metadata[META_CLOCK])
    assert clock["wall_ns"] > 1_600_000_000 * 10**9 and clock["mono_ns"] > 0
    parts = pq.read_table(next((tmp_path / "partitions").rglob("*.parquet")))
    assert parts.num_rows == 10 and parts.column("record_latency_ns").to_pylist() == [5] * 10


def test_strings_are_dictionary_encoded_and_numbers_plain(tmp_path: Path) -> None:
    """A dictionary of timestamps or durations overflows and falls back: the writer tries one
    only for the string columns (what is read back is the same either way)."""
    ten_rows(tmp_path)
    meta = pq.ParquetFile(next((tmp_path / "exchanges").rglob("*.parquet"))).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["client_id"]), encodings["client_id"]
    assert not any("DICTIONARY" in e for e in encodings["ts_ns"]), encodings["ts_ns"]
    assert not any("DICTIONARY" in e for e in encodings["total_ns"]), encodings["total_ns"]


def test_size_rotation_closes_files(tmp_path: Path) -> None:
    w = TraceWriter(str(tmp_path), proxy_id="p1", rotate_bytes=1)  # every flush overflows the size limit
    w.start()
    ev, s = sample()
    put_fetch(w, "111", 1, ev, s)
    hand_over_aged(w)
    deadline = time.monotonic() + 10
    while w.files_closed < 2 and time.monotonic() < deadline:  # the write closes both tables' files
        time.sleep(0.05)
    assert w.files_closed == 2
    put_fetch(w, "111", 1, ev, s)
    w.close()
    assert w.written == 4
    assert len(list((tmp_path / "exchanges").rglob("*.parquet"))) == 2
    assert not list(tmp_path.rglob(".tmp-*"))


def test_a_full_queue_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    w = TraceWriter(str(tmp_path), proxy_id="p1", queue_rows=4)
    ev, s = sample()
    for _ in range(10):  # the writer thread has not started: the queue fills at 4 rows
        put_fetch(w, "111", 1, ev, s)
    assert w.dropped == 20 - 4
    w.start()
    w.close()
    assert w.written == 4


def test_writers_sharing_a_directory_never_share_a_file_and_split_rows_by_hour(tmp_path: Path) -> None:
    """Many sidecars may share one trace directory: each file has one writer (its name carries the
    proxy and a random part), and holds rows of one UTC hour, in that hour's directory."""
    _, s = sample()
    hour = 3600 * 10**9
    base = (1_700_000_000 * 10**9 // hour + 1) * hour  # an hour boundary
    writers = [TraceWriter(str(tmp_path), proxy_id=f"10.0.0.{i}:9092") for i in range(3)]
    for w in writers:
        w.start()
    for k in range(40):  # rows 2 ms apart across the hour boundary, from every writer
        for i, w in enumerate(writers):
            w.columns.fetch(base - 40_000_000 + k * 2_000_000, w.proxy_id, "111", i, k, s, [])
    for w in writers:
        w.close()
    files = sorted((tmp_path / "exchanges").rglob("*.parquet"))
    assert len(files) == 6  # per writer: one file before the hour, one after
    assert len({f.name for f in files}) == 6
    for f in files:
        t = pq.read_table(f).to_pylist()
        assert len({r["proxy_id"] for r in t}) == 1 and f.name.split("-")[1] == t[0]["proxy_id"].replace(":", "_")
        want = f"date={f.parent.parent.name.removeprefix('date=')}/hour={f.parent.name.removeprefix('hour=')}"
        assert {trace_layout.hour_dir(r["ts_ns"] // hour) for r in t} == {want}
    assert sum(pq.read_metadata(f).num_rows for f in files) == 3 * 40


def test_steady_traffic_still_rotates_on_time(tmp_path: Path) -> None:
    """Rows arriving without a pause (the queue never idles a second) are still written and their
    files closed every rotation period: readers see the traces while the proxy runs."""
    ev, s = sample()
    w = TraceWriter(str(tmp_path), proxy_id="p1", rotate_s=0.5)
    w.start()
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:  # a row pair every 50 ms for 4 s, the proxy's tick after each
        put_fetch(w, "111", 1, ev, s)
        w.columns.tick(time.monotonic_ns())
        time.sleep(0.05)
    closed_while_running = len(list((tmp_path / "exchanges").rglob("*.parquet")))
    w.close()
    assert closed_while_running >= 2
    assert not list(tmp_path.rglob(".tmp-*"))
    assert sum(pq.read_metadata(f).num_rows for f in (tmp_path / "exchanges").rglob("*.parquet")) == w.written // 2


def test_a_quiet_writer_sleeps_until_a_file_is_due_and_still_closes_it_on_time(tmp_path: Path) -> None:
    """With no rows pending the writer wakes only for a batch or an open file's rotation (it used
    to wake every second): its one file of rows is closed when its period ends, and with no file
    open and no rows it does not look at its queue again."""
    ev, s = sample()
    w = TraceWriter(str(tmp_path), proxy_id="p1", rotate_s=0.8)
    waits: list[float | None] = []
    get = w.queue.get

    def counted(block: bool = True, timeout: float | None = None) -> object:
        waits.append(timeout)
        return get(block, timeout)

    w.queue.get = counted  # type: ignore[method-assign]
    w.start()
    put_fetch(w, "111", 1, ev, s)
    w.columns.flush()
    def closed() -> list[Path]:
        return [f for f in (tmp_path / "exchanges").rglob("*.parquet") if not f.name.startswith(".tmp-")]

    deadline = time.monotonic() + 10.0
    while not closed() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert closed(), "the file was not closed at its rotation"
    time.sleep(0.3)
    seen = len(waits)
    time.sleep(2.5)  # nothing pending, no file open: the old writer looked at its queue twice more
    idle_waits = len(waits) - seen
    w.close()
    assert idle_waits == 0, waits
    assert waits[-1] is not None and waits[-1] >= 30.0  # the last wait before close: the idle bound
    assert sum(pq.read_metadata(f).num_rows for f in closed()) == 1


def test_rows_go_to_the_writer_in_batches_not_one_by_one(tmp_path: Path) -> None:
    """A row is a value per column list; the writer thread is handed a batch when it is full, or
    by the proxy's tick once its first row has waited the writer's hold (30 s, or the rotation
    period if shorter): never once per row, and at a sidecar's pace not once a second (a batch
    converted every second cost its fixed part every second)."""
    w = TraceWriter(str(tmp_path), proxy_id="p1", batch_rows=8)
    assert w.hold_ns == 30 * 10**9 and w.columns.every_ns == w.hold_ns
    assert TraceWriter(str(tmp_path), proxy_id="p2", rotate_s=2.0).columns.every_ns == 2 * 10**9
    ev, s = sample()
    for _ in range(3):  # 6 rows: under a batch
        put_fetch(w, "111", 1, ev, s)
    assert w.queue.qsize() == 0 and w.columns.batch.rows == 6
    put_fetch(w, "111", 1, ev, s)  # 8 rows: one batch handed over
    assert w.queue.qsize() == 1 and w.columns.batch.rows == 0
    put_fetch(w, "111", 1, ev, s)
    t = time.monotonic_ns()
    w.columns.tick(t)  # the first tick to find these rows dates them
    w.columns.tick(t + 1_000_000_000)  # a second later: the rows wait
    w.columns.tick(t + w.hold_ns - 1)
    assert w.queue.qsize() == 1 and w.columns.batch.first_ns == t
    w.columns.tick(t + w.hold_ns)
    assert w.queue.qsize() == 2 and w.columns.batch.rows == 0
    w.start()
    w.close()
    assert (w.written, w.dropped) == (10, 0)
    ex = pq.read_table(next((tmp_path / "exchanges").rglob("*.parquet")))
    assert ex.num_rows == 5 and ex.column("correlation_id").to_pylist() == [ev.correlation_id] * 5


def test_a_row_of_the_wrong_width_is_refused() -> None:
    from fetchlat.metrics.rows import TraceBatch, _add

    b = TraceBatch()
    with pytest.raises(ValueError, match="3 values for 7 columns"):
        _add(b, "replication", (1, "p", "1"))
    assert b.rows == 0


def test_the_writer_lets_go_of_the_interpreter_between_columns(tmp_path: Path, monkeypatch) -> None:
    """Converting a batch holds the GIL for milliseconds; the event loop's thread must never wait
    for a whole batch: the writer offers to let go after each column (proxy/traces.py,
    ``GilTurns``), here with no time to hold it, so it lets go after every one."""
    from fetchlat.proxy import traces

    yields: list[int] = []
    monkeypatch.setattr(traces, "yield_gil", lambda: yields.append(1))
    monkeypatch.setattr(traces, "YIELD_AFTER_NS", 0)
    ten_rows(tmp_path)
    assert len(yields) == len(EXCHANGES.names) + len(PARTITIONS.names)  # once after each column of each table


def test_the_writer_lets_go_once_it_has_held_the_interpreter_half_a_millisecond(monkeypatch) -> None:
    """Letting go costs a system call and often a switch of threads: ``GilTurns`` does it only
    when YIELD_AFTER_NS has passed since the batch began or since it last let go."""
    from fetchlat.proxy import traces

    now = [0]
    yields: list[int] = []
    monkeypatch.setattr(traces, "yield_gil", lambda: yields.append(now[0]))
    turns = traces.GilTurns(now=lambda: now[0])
    turns.begin()
    for _ in range(20):  # twenty columns of 100 µs each
        now[0] += 100_000
        turns()
    assert yields == [500_000, 1_000_000, 1_500_000, 2_000_000] and turns.yields == 4
    turns.begin()  # a new batch starts its own count
    now[0] += 400_000
    turns()
    assert turns.yields == 4


def test_rows_handed_over_every_second_make_few_row_groups(tmp_path: Path) -> None:
    """The proxy once handed a batch over at each tick while rows came, and the writer took a
    queue that stayed empty for its one-second wait as the traffic stopping and wrote a row group
    each time: a soak's 5-minute files held ~300 row groups of ~100 rows, and their footers, kept
    in memory until the file closes, grew the sidecar by ~10 MB per file. Batches a second apart
    are one row group now (written when the oldest row has waited the hold, or at close)."""
    ev, s = sample()
    w = TraceWriter(str(tmp_path), proxy_id="p1")
    w.start()
    for _ in range(4):  # a batch every 1.05 s, a bit longer than the writer's wait
        put_fetch(w, "111", 1, ev, s)
        w.columns.flush()
        time.sleep(1.05)
    w.close()
    files = list((tmp_path / "exchanges").rglob("*.parquet"))
    assert len(files) == 1 and pq.read_metadata(files[0]).num_rows == 4
    assert pq.read_metadata(files[0]).num_row_groups == 1


@pytest.mark.parametrize("road", [True, False] if native.core() is not None else [False])
def test_a_row_that_cannot_be_converted_drops_its_table_in_that_batch_and_nothing_else(tmp_path: Path,
                                                                                       road: bool) -> None:
    """A value past its column's range (pyarrow raises OverflowError past int64, which the writer
    once let escape, ending its thread): that table's rows of that batch are counted dropped, the
    writer goes on, later batches are written."""
    from fetchlat.metrics.rows import TraceColumns, _add

    w = TraceWriter(str(tmp_path), proxy_id="p1")
    w.columns = TraceColumns(w.hand_off, native_columns=road)
    w.start()
    _add(w.columns.batch, "replication", (1_700_000_000 * 10**9, "p1", "0", 1, "t", 0, 2**63))
    _add(w.columns.batch, "replication", (1_700_000_000 * 10**9, "p1", "0", 1, "t", 0, 5))
    ev, s = sample()
    put_fetch(w, "111", 7, ev, s)
    w.columns.flush()
    for _ in range(3):
        put_fetch(w, "111", 7, ev, s)
    w.close()
    assert w.dropped == 2 and w.written == 4 + 4  # the 4 fetches and their 4 partitions rows
    ex = pq.read_table(next((tmp_path / "exchanges").rglob("*.parquet")))
    assert ex.num_rows == 4


def test_the_writers_arrow_buffers_come_from_glibc_unless_the_user_chose(tmp_path: Path) -> None:
    """``use_system_pool``: a writer's Arrow buffers come from glibc's heap (trimmed once a minute
    with the rest), not mimalloc's; ``ARROW_DEFAULT_MEMORY_POOL`` set by the user wins. Each case
    in a fresh interpreter (the pool is the process's)."""
    import os
    import subprocess
    import sys

    code = ("import sys; from fetchlat.proxy.traces import TraceWriter; import pyarrow as pa; "
            "w = TraceWriter(sys.argv[1], proxy_id='p'); print(w.pool, pa.default_memory_pool().backend_name)")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a")], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out == ["system", "system"]
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "b")],
                         env={**env, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out == ["mimalloc", "mimalloc"]


_BIG_ANON = (
    "import re\n"
    "def big():\n"
    "    out, cur = [], None\n"
    "    for line in open('/proc/self/smaps'):\n"
    "        m = re.match(r'^([0-9a-f]+)-([0-9a-f]+) \\S+ \\S+ \\S+ \\S+\\s*(\\S*)', line)\n"
    "        if m:\n"
    "            cur = ((int(m.group(2), 16) - int(m.group(1), 16)) >> 20, m.group(3))\n"
    "        elif line.startswith('Rss:') and cur and cur[0] >= 512 and not cur[1]:\n"
    "            out.append(cur[0])\n"
    "    return out\n"
)


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="no /proc smaps here")
@pytest.mark.parametrize("through_the_command", [True, False])
def test_the_command_keeps_the_parquet_writer_off_mimalloc(tmp_path: Path, through_the_command: bool) -> None:
    """The ``fetchlat`` command chooses Arrow's system pool before pyarrow loads: a Parquet file
    written with zstd and dictionaries (as the trace writer does) leaves no mimalloc reservation
    (an anonymous mapping of 512 MiB or more) in the process. Without it, ``use_system_pool``
    alone leaves one: the writer's buffers take the pool fixed at load."""
    import os
    import subprocess
    import sys

    code = (("import fetchlat.app\n" if through_the_command else "") + _BIG_ANON +
            "import sys, pyarrow as pa, pyarrow.parquet as pq\n"
            "from fetchlat.proxy.traces import use_system_pool\n"
            "use_system_pool()\n"
            "t = pa.table({'a': pa.array(range(100000)), 's': pa.array([f'x{i % 7}' for i in range(100000)])})\n"
            "w = pq.ParquetWriter(sys.argv[1], t.schema, compression='zstd')\n"
            "for _ in range(10): w.write_table(t)\n"
            "w.close()\n"
            "print(big())\n")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.parquet")], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    assert (out == "[]") == through_the_command, out


def test_rows_split_by_hour_and_the_split_is_warmed_at_start() -> None:
    hour = 3600 * 10**9
    rows = pa.table({"ts_ns": pa.array([hour - 1, hour, 3 * hour + 5, hour + 2], type=pa.int64())})
    parts, newest = traces.by_hour(rows)
    assert newest == 3 * hour + 5
    assert [(h, p.column("ts_ns").to_pylist()) for h, p in parts] == [
        (0, [hour - 1]), (1, [hour, hour + 2]), (2, []), (3, [3 * hour + 5])]
    one, _ = traces.by_hour(rows.slice(1, 1))
    assert [(h, p.num_rows) for h, p in one] == [(1, 1)]
    traces.warm_by_hour()  # what the writer's thread runs first: it must not raise on an empty start


def test_rows_are_written_once_they_have_waited_the_hold_not_at_a_pause(tmp_path: Path) -> None:
    """A batch handed over young waits at the writer until its first row has waited the hold since
    it was gathered, through a pause in the traffic (a pause of 3 s used to write a row group of
    whatever had come: a fixed cost for a few rows, every lull); a batch the loop handed over for
    its age is written at once."""
    w = TraceWriter(str(tmp_path), proxy_id="p1", rotate_s=300.0)
    w.start()
    ev, s = sample()
    put_fetch(w, "111", 1, ev, s)
    w.columns.flush()  # young: handed over full, or at close
    time.sleep(3.5)
    assert w.written == 0
    put_fetch(w, "111", 1, ev, s)
    hand_over_aged(w)  # this batch's rows have waited the hold: both batches' rows go now
    deadline = time.monotonic() + 5.0
    while w.written < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w.written == 4
    w.close()
    files = list((tmp_path / "exchanges").rglob("*.parquet"))
    assert len(files) == 1 and pq.read_metadata(files[0]).num_row_groups == 1


def test_the_writer_thread_carries_its_name_in_the_operating_system(tmp_path: Path) -> None:
    """``top -H`` and ``/proc/PID/task/*/comm`` tell the writer's thread from the loop's
    (``bench/consume_small.py`` counts its CPU by it)."""
    import sys

    from testkit.procfs import thread_named

    if not sys.platform.startswith("linux"):
        pytest.skip("thread names are read from /proc")
    w = TraceWriter(str(tmp_path), proxy_id="p1")
    w.start()
    try:
        tid, deadline = None, time.monotonic() + 5.0
        while time.monotonic() < deadline:  # the thread names itself as it starts
            try:
                tid = thread_named("fetchlat-traces")
                break
            except RuntimeError:
                time.sleep(0.01)
        assert tid == w._thread.native_id
    finally:
        w.close()

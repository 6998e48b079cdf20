"""Per-request Parquet traces, written by a thread that takes the rows in batches of columns.

The event loop appends each row's values to column buffers (``metrics/rows.py``:
``TraceColumns``) and hands a whole batch over when it holds ``batch_rows`` rows, or at the
proxy's tick once its first row has waited the writer's hold (``TraceColumns.tick``): one
hand-off per batch, never one per row, so the writer thread wakes a few times a minute at a
sidecar's pace, not once a request. A full queue of batches
drops the batch and counts its rows (``dropped``); the loop never blocks. The writer thread
makes each column an Arrow array (the native core's buffers wrapped as they are; on the Python
road each list converted at once), letting go of the interpreter between columns once it has
held it for half a millisecond (``GilTurns``: the loop never waits for a whole batch), gathers a
table's rows into row groups, rotates files by time and size, and writes each file under a temporary name
(``.tmp-*``) that it renames into place when closed: readers see only whole files. Each file
records one (wall, monotonic) clock pair. Where files go (an hour directory per row's UTC
hour, a name no other writer picks) is ``metrics/trace_layout.py``'s.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..metrics import trace_layout as layout
from ..metrics.rows import CONVERSION_ERRORS, DEFAULT_BATCH_ROWS, TraceBatch, TraceColumns
from ..metrics.trace_schema import META_CLOCK, META_SCHEMA_VERSION, SCHEMA_VERSION, TABLES
from . import clock
from .memory import libc_fn

log = logging.getLogger("fetchlat.traces")

ROWS_PER_GROUP = 8192
FLUSH_EVERY_S = 1.0
FLUSH_EVERY_NS = int(FLUSH_EVERY_S * 1e9)
# The longest a row waits in memory (or the rotation period, if shorter), gathered on the loop
# and pending at the writer together. A file is read only once it is closed, so holding rows
# costs no reader anything; every row group adds its column statistics to the footer the writer
# keeps in memory until the file closes. Written every second or so, a 5-minute file of a soak's
# sidecar held 298 row groups of ~108 rows, a footer of 0.94 MB (30 % of the file), and the
# sidecar's RSS rose ~10 MB over each file's life (bench/soak_kafka.py). Each hand-off and each
# write also costs a fixed part whatever its rows (a batch's columns made Arrow arrays: 0.6-1.1
# ms for 100-1 000 rows; a row group of either: 2.1-3.7 ms of exchanges and 1.3-2.2 of
# partitions here): at a sidecar's pace, a batch handed over every second was a batch converted
# every second, and a pause of 3 s wrote a row group of whatever had come.
HOLD_NS = 30 * 10**9
LATE_ROWS_NS = 60 * 10**9  # a past hour's file stays open this long for rows still in flight
IDLE_CHECK_NS = 60 * 10**9  # the longest a writer with nothing pending sleeps (a batch wakes it at once)


THREAD_NAME = "fetchlat-traces"


def name_this_thread(name: str) -> None:
    """The operating system's name for the calling thread (Linux ``PR_SET_NAME``, 15 bytes at
    most: what ``top -H`` and ``/proc/PID/task/*/comm`` show, beside the core's
    ``fetchlat-relay``); nothing where the C library has no ``prctl``."""
    prctl = libc_fn("prctl")
    if prctl is not None:
        prctl(15, name.encode()[:15], 0, 0, 0)


def to_table(batch: TraceBatch, table: str, between: Callable[[], None] | None = None) -> pa.Table:
    """One table's rows of a batch as Arrow (``TraceBatch.arrays``: the native road's buffers
    wrapped, the Python road's lists converted a column at a time, ``between`` after each)."""
    return pa.Table.from_arrays(batch.arrays(table, between), schema=TABLES[table])


def yield_gil() -> None:
    """Let the event loop's thread run if it waits for the interpreter. Converting a column of
    Python values holds the GIL for its whole length (~150 µs for 4 096 values here), a whole
    batch's tables for 4-5 ms; a loop thread waking meanwhile would wait for all of it (Python
    hands the GIL over only every 5 ms, and not inside a C call). ``GilTurns`` calls this
    between columns once the writer has held the interpreter long enough."""
    time.sleep(0)


YIELD_AFTER_NS = 500_000  # the longest the writer converts before it lets the loop's thread run


class GilTurns:
    """Offered after each column of a batch's conversion (``to_table``'s ``between``): lets go of
    the interpreter (``yield_gil``) once ``YIELD_AFTER_NS`` has passed since the batch began or
    since it last did, so the loop waits at most that and one column. Letting go after every
    column cost the writer more than converting did: a ``time.sleep(0)`` is a system call and
    often a switch of threads, 37-97 µs of the writer's CPU each on this VM, some fifty a batch,
    where the native columns' whole conversion takes 0.4-1.3 ms (``bench/trace_gil.py``)."""

    def __init__(self, now: Callable[[], int] = time.perf_counter_ns) -> None:
        self._now = now
        self._since = 0
        self.yields = 0  # how many times it let go (the bench and the tests read it)

    def begin(self) -> None:
        self._since = self._now()

    def __call__(self) -> None:
        if self._now() - self._since >= YIELD_AFTER_NS:
            yield_gil()
            self.yields += 1
            self._since = self._now()


def use_system_pool() -> str:
    """Arrow's buffers from glibc's allocator, not the mimalloc pool the pyarrow wheels default to,
    unless ``ARROW_DEFAULT_MEMORY_POOL`` says otherwise; the pool in use. The trace writer is the
    proxy's only Arrow user. mimalloc keeps freed segments for reuse and gives them back on its own
    schedule: a writer alone at 1 000 rows a second (``bench/writer_memory.py``, runs of 45 and 25
    minutes beside a soak, from minute 5) held 4.5-13 MB of them, and its RSS averaged 98.2-98.5 MB
    with a standard deviation of 1.7-2.0 MB between samples, where glibc's heap, which the proxy
    trims once a minute (``proxy/memory.py``), held the same work at 91.2-92.6 MB, standard
    deviation 0.71-0.73 MB.
    The writing cost the same within the noise (``bench/trace_write.py``).
    A sidecar's resident size that swings by megabytes hides a slope of one MB an hour
    (``docs/reliability.md``). This covers what pyarrow allocates; the Parquet writer's own
    buffers take Arrow's process-wide pool, fixed when pyarrow loads: the ``fetchlat`` command
    sets ``ARROW_DEFAULT_MEMORY_POOL=system`` before that (``app/__init__.py``; the twelfth soak
    found mimalloc's 1 GiB reservation still in every sidecar without it)."""
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        pa.set_memory_pool(pa.system_memory_pool())
    return str(pa.default_memory_pool().backend_name)


def dictionary_columns(table: str) -> list[str]:
    """The columns a file dictionary-encodes: the strings (a few values each: broker, api, kind,
    outcome, client id). Numbers are left plain: a dictionary of timestamps and durations
    overflows and falls back, work thrown away (``bench/trace_write.py``: exchanges written in
    0.99 µs a row against 1.32 with every column tried, files 15-19 % smaller)."""
    return [f.name for f in TABLES[table] if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]


def parquet_writer(sink: str | pa.NativeFile, table: str, schema: pa.Schema) -> pq.ParquetWriter:
    """A Parquet writer of ``table``'s rows as every trace file is written (zstd, the string
    columns dictionary-encoded): the files, and the warm-up that runs their code first."""
    return pq.ParquetWriter(sink, schema, compression="zstd", use_dictionary=dictionary_columns(table))


def warm_writer() -> None:
    """Each table written as a file is, in memory, with two rows of plain values, thrown away,
    when the writer starts. Writing and closing a Parquet file runs code (the encoders, zstd,
    the footer) whose pages and first buffers come in the first time rows are written: a proxy
    churning topics (``tests/integration/test_bounded.py``) grew 6 MB at its first file's rows,
    3.4 MB of it the libraries' code pages, long after its warm-up. Paged in at start-up, they
    are there before anyone measures."""
    for table, schema in TABLES.items():
        columns = [pa.array(["a", "b"] if pa.types.is_string(f.type) else [True, False]
                            if pa.types.is_boolean(f.type) else [0, 1], type=f.type) for f in schema]
        with parquet_writer(pa.BufferOutputStream(), table, schema) as w:
            w.write_table(pa.Table.from_arrays(columns, schema=schema))


class _File:
    def __init__(self, directory: str, table: str, proxy_id: str, hour: int) -> None:
        self.table = table
        self.schema = TABLES[table].with_metadata({
            META_SCHEMA_VERSION: str(SCHEMA_VERSION).encode(),
            META_CLOCK: json.dumps({"wall_ns": clock.wall_ns(), "mono_ns": clock.now_ns()}).encode(),
        })
        name = layout.file_name(clock.wall_ns(), proxy_id)
        where = os.path.join(directory, table, layout.hour_dir(hour))
        os.makedirs(where, exist_ok=True)
        self.final = os.path.join(where, name)
        self.tmp = os.path.join(where, f".tmp-{name}")
        self.writer = parquet_writer(self.tmp, table, self.schema)
        self.opened_ns = clock.now_ns()
        self.rows = 0

    def write(self, rows: pa.Table) -> None:
        self.writer.write_table(rows.replace_schema_metadata(self.schema.metadata))
        self.rows += rows.num_rows

    def close(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.final)


def by_hour(rows: pa.Table) -> tuple[list[tuple[int, pa.Table]], int]:
    """``rows`` split by the UTC hour of their ``ts_ns`` (each hour's go to its own file), and the
    newest ``ts_ns`` among them."""
    ts = rows.column("ts_ns")
    lo, hi = pc.min_max(ts).values()
    first, last = layout.hour_of(lo.as_py()), layout.hour_of(hi.as_py())
    if first == last:
        return [(first, rows)], hi.as_py()
    hours = pc.divide(ts, layout.HOUR_NS)  # integer division: ts_ns >= 0
    return [(h, rows.filter(pc.equal(hours, h))) for h in range(first, last + 1)], hi.as_py()


def warm_by_hour() -> None:
    """``by_hour`` of two rows an hour apart, thrown away, when the writer starts. The split runs
    Arrow kernels nothing else runs; their code pages in the first time rows cross an hour:
    in the thirteenth soak every sidecar's mapped files rose 0.6 MB at 09:00:09-09:00:19 and
    stayed (docs/reliability.md). Paged in at start-up, they are there before anyone measures."""
    by_hour(pa.table({"ts_ns": pa.array([0, layout.HOUR_NS], type=pa.int64())}))


class TraceWriter:
    def __init__(self, directory: str, *, proxy_id: str, queue_rows: int = 100_000, rotate_s: float = 300.0,
                 rotate_bytes: int = 128 * 1024 * 1024, block: bool = False,
                 batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        self.directory = directory
        self.pool = use_system_pool()
        self.block = block  # a full queue waits for the writer (offline: no row may be lost) instead of dropping
        self.proxy_id = proxy_id
        self.rotate_ns = int(rotate_s * 1e9)
        self.rotate_bytes = rotate_bytes
        self.hold_ns = min(self.rotate_ns, HOLD_NS)  # the longest a row waits in memory
        # the bound on rows in memory: queue_rows in batches, plus the batch being gathered
        self.queue: queue.Queue[TraceBatch | None] = queue.Queue(maxsize=max(1, queue_rows // batch_rows))
        self.columns = TraceColumns(self.hand_off, batch_rows=min(batch_rows, queue_rows), every_ns=self.hold_ns)
        self.dropped = 0
        self.written = 0
        self.files_closed = 0
        self._newest_ns = 0  # the newest row time written (the writer thread's)
        for table in TABLES:
            os.makedirs(os.path.join(directory, table), exist_ok=True)
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    def start(self) -> None:
        self._thread.start()

    # on the event loop --------------------------------------------------------------
    def hand_off(self, batch: TraceBatch) -> None:
        """A batch of rows to the writer thread; a full queue drops it and counts its rows."""
        if self.block:
            self.queue.put(batch)
            return
        try:
            self.queue.put_nowait(batch)
        except queue.Full:
            self.dropped += batch.rows

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush everything gathered and queued, close and rename the files."""
        if not self._thread.is_alive():
            return
        try:
            if self.columns.batch.rows:
                self.queue.put(self.columns.take(), timeout=timeout_s)
            self.queue.put(None, timeout=timeout_s)
        except queue.Full:
            log.error("trace queue stuck; %d batches not written", self.queue.qsize())
        self._thread.join(timeout_s)

    # on the writer thread ------------------------------------------------------------
    def _run(self) -> None:
        """Rows wait in memory until their table has a row group's worth or the oldest has waited
        ``hold_ns`` since it was gathered (a batch's ``first_ns``: a batch the loop handed over
        for its age is written at once); files are checked for rotation every second while rows
        are pending, after every write, and, with nothing pending, when the first open file's
        rotation falls due (``_rotation_due``)."""
        name_this_thread(THREAD_NAME)
        warm_by_hour()
        warm_writer()
        files: dict[tuple[str, int], _File] = {}
        pending: dict[str, list[pa.Table]] = {t: [] for t in TABLES}
        counts: dict[str, int] = dict.fromkeys(TABLES, 0)
        since: dict[str, int] = {}  # table -> when its oldest pending row was gathered
        hold_ns = self.hold_ns
        turns = GilTurns()
        next_check = clock.now_ns() + FLUSH_EVERY_NS
        stop = False
        while not stop:
            timed_out = False
            now = clock.now_ns()
            if since:  # rows pending: the next due by time, looked at every second
                wake_ns = min([next_check, *(t + hold_ns for t in since.values())])
                wait_s = min(FLUSH_EVERY_S, max(0.01, (wake_ns - now) / 1e9))
            else:  # nothing pending: only a batch, or a file's rotation, can make work
                wait_s = max(0.01, (self._rotation_due(files, now) - now) / 1e9)
            try:
                batch = self.queue.get(timeout=wait_s)
            except queue.Empty:
                batch, timed_out = None, True
            if batch is None and not timed_out:
                stop = True
            elif batch is not None:
                gathered_ns = batch.first_ns or clock.now_ns()
                turns.begin()
                for table, n in batch.counts.items():
                    if n:
                        try:
                            pending[table].append(to_table(batch, table, turns))
                        except CONVERSION_ERRORS as exc:
                            self.dropped += n
                            log.error("%s trace rows could not be converted (%s); %d rows dropped", table, exc, n)
                            continue
                        counts[table] += n
                        since[table] = min(since.get(table, gathered_ns), gathered_ns)
            now = clock.now_ns()
            due = [t for t, n in counts.items()
                   if n and (stop or n >= ROWS_PER_GROUP or now - since[t] >= hold_ns)]
            if due:
                next_check = now  # a file written to may be due for its size, or its hour over
            for table in due:
                rows = pa.concat_tables(pending[table])
                try:
                    self._write(files, table, rows)
                except (OSError, pa.ArrowException) as exc:
                    self.dropped += rows.num_rows
                    log.error("writing %s traces failed (%s); %d rows dropped", table, exc, rows.num_rows)
                pending[table].clear()
                counts[table] = 0
                del since[table]
            if stop or now >= next_check or (timed_out and not since):  # (the idle wait was for a rotation)
                next_check = now + FLUSH_EVERY_NS
                self._rotate(files, force=stop)

    def _rotation_due(self, files: dict[tuple[str, int], _File], now: int) -> int:
        """When the writer must look at its files again with no rows pending: the first open file's
        rotation by time (by size, or by the rows' hour, a file changes only when written), at most
        ``IDLE_CHECK_NS`` from now. A writer with no traffic used to wake every second for nothing."""
        due = [f.opened_ns + self.rotate_ns for f in files.values()]
        return min([now + IDLE_CHECK_NS, *due])

    def _write(self, files: dict[tuple[str, int], _File], table: str, rows: pa.Table) -> None:
        """Rows to the open file of their hour, which this creates when there is none."""
        parts, newest_ns = by_hour(rows)
        self._newest_ns = max(self._newest_ns, newest_ns)
        for hour, part in parts:
            if not part.num_rows:
                continue
            f = files.get((table, hour))
            if f is None:
                f = files[(table, hour)] = _File(self.directory, table, self.proxy_id, hour)
            f.write(part)
            self.written += part.num_rows

    def _rotate(self, files: dict[tuple[str, int], _File], *, force: bool) -> None:
        """Close (and rename into place) files that are old, big, or of an hour the rows have left
        (by the rows' own time: a capture replayed from last week is written like a live run)."""
        now_hour = layout.hour_of(self._newest_ns - LATE_ROWS_NS)
        for key, f in list(files.items()):
            try:
                done = (force or clock.now_ns() - f.opened_ns >= self.rotate_ns or key[1] < now_hour
                        or os.path.getsize(f.tmp) >= self.rotate_bytes)
                if done:
                    del files[key]
                    f.close()
                    self.files_closed += 1
            except (OSError, pa.ArrowException) as exc:
                log.error("closing %s traces failed (%s)", key[0], exc)

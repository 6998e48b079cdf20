"""Per-request Parquet traces, written by a thread behind a bounded queue.

The event loop only puts rows (built by ``metrics/rows.py``) on the queue (full: drop and count, never
block). The writer thread batches rows into row groups, rotates files by time and size, and
writes each file under a temporary name (``.tmp-*``) that it renames into place when closed:
readers see only whole files. Each file records one (wall, monotonic) clock pair. Where files
go (an hour directory per row's UTC hour, a name no other writer picks) is
``metrics/trace_layout.py``'s.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..metrics import trace_layout as layout
from ..metrics.trace_schema import META_CLOCK, META_SCHEMA_VERSION, SCHEMA_VERSION, TABLES
from . import clock

log = logging.getLogger("fetchlat.traces")

ROWS_PER_GROUP = 8192
FLUSH_EVERY_S = 1.0
FLUSH_EVERY_NS = int(FLUSH_EVERY_S * 1e9)
HOLD_NS = 10 * 10**9  # the longest a row waits in memory under steady traffic
LATE_ROWS_NS = 60 * 10**9  # a past hour's file stays open this long for rows still in flight


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
        self.writer = pq.ParquetWriter(self.tmp, self.schema, compression="zstd")
        self.opened_ns = clock.now_ns()
        self.rows = 0

    def write(self, rows: list[dict[str, Any]]) -> None:
        self.writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
        self.rows += len(rows)

    def close(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.final)


class TraceWriter:
    def __init__(self, directory: str, *, proxy_id: str, queue_rows: int = 100_000, rotate_s: float = 300.0,
                 rotate_bytes: int = 128 * 1024 * 1024, block: bool = False) -> None:
        self.directory = directory
        self.block = block  # a full queue waits for the writer (offline: no row may be lost) instead of dropping
        self.proxy_id = proxy_id
        self.rotate_ns = int(rotate_s * 1e9)
        self.rotate_bytes = rotate_bytes
        self.queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(maxsize=queue_rows)
        self.dropped = 0
        self.written = 0
        self.files_closed = 0
        self._newest_ns = 0  # the newest row time written (the writer thread's)
        for table in TABLES:
            os.makedirs(os.path.join(directory, table), exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="fetchlat-traces", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # on the event loop --------------------------------------------------------------
    def put(self, table: str, row: dict[str, Any]) -> None:
        """Queue one row (``metrics/rows.py`` builds them); a full queue drops and counts it."""
        if self.block:
            self.queue.put((table, row))
            return
        try:
            self.queue.put_nowait((table, row))
        except queue.Full:
            self.dropped += 1

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush everything queued, close and rename the files."""
        if not self._thread.is_alive():
            return
        try:
            self.queue.put(None, timeout=timeout_s)
        except queue.Full:
            log.error("trace queue stuck; %d rows not written", self.queue.qsize())
        self._thread.join(timeout_s)

    # on the writer thread ------------------------------------------------------------
    def _run(self) -> None:
        """Rows wait in memory until their table has a row group's worth, the queue has been idle
        for a second, or the oldest has waited HOLD (or the rotation period, if shorter); files
        are checked for rotation every second."""
        files: dict[tuple[str, int], _File] = {}
        pending: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        since: dict[str, int] = {}  # table -> when its oldest pending row arrived
        hold_ns = min(self.rotate_ns, HOLD_NS)
        next_check = clock.now_ns() + FLUSH_EVERY_NS
        stop = False
        while not stop:
            idle = False
            try:
                item = self.queue.get(timeout=FLUSH_EVERY_S)
            except queue.Empty:
                item, idle = ("", {}), True
            if item is None:
                stop = True
            elif item[0]:
                pending[item[0]].append(item[1])
                since.setdefault(item[0], clock.now_ns())
            now = clock.now_ns()
            due = [t for t, rows in pending.items()
                   if rows and (stop or idle or len(rows) >= ROWS_PER_GROUP or now - since[t] >= hold_ns)]
            for table in due:
                rows = pending[table]
                try:
                    self._write(files, table, rows)
                except (OSError, pa.ArrowException) as exc:
                    self.dropped += len(rows)
                    log.error("writing %s traces failed (%s); %d rows dropped", table, exc, len(rows))
                rows.clear()
                del since[table]
            if stop or now >= next_check:
                next_check = now + FLUSH_EVERY_NS
                self._rotate(files, force=stop)

    def _write(self, files: dict[tuple[str, int], _File], table: str, rows: list[dict[str, Any]]) -> None:
        """Rows to the open file of their hour, which this creates when there is none."""
        by_hour: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            ts = r["ts_ns"]
            self._newest_ns = max(self._newest_ns, ts)
            by_hour.setdefault(layout.hour_of(ts), []).append(r)
        for hour, part in by_hour.items():
            f = files.get((table, hour))
            if f is None:
                f = files[(table, hour)] = _File(self.directory, table, self.proxy_id, hour)
            f.write(part)
            self.written += len(part)

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

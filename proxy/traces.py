"""Per-request Parquet traces, written by a thread behind a bounded queue.

The event loop only puts rows (built by ``metrics/rows.py``) on the queue (full: drop and count, never
block). The writer thread batches rows into row groups, rotates files by time and size, and
writes each file under a temporary name (``.tmp-*``) that it renames into place when closed:
readers see only whole files. Each file records one (wall, monotonic) clock pair.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fetchlat.metrics.trace_schema import META_CLOCK, META_SCHEMA_VERSION, SCHEMA_VERSION, TABLES

from . import clock

log = logging.getLogger("fetchlat.traces")

ROWS_PER_GROUP = 8192
FLUSH_EVERY_S = 1.0


class _File:
    def __init__(self, directory: str, table: str) -> None:
        self.table = table
        self.schema = TABLES[table].with_metadata({
            META_SCHEMA_VERSION: str(SCHEMA_VERSION).encode(),
            META_CLOCK: json.dumps({"wall_ns": clock.wall_ns(), "mono_ns": clock.now_ns()}).encode(),
        })
        name = f"{clock.wall_ns()}-{uuid.uuid4().hex[:8]}.parquet"
        self.final = os.path.join(directory, table, name)
        self.tmp = os.path.join(directory, table, f".tmp-{name}")
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
        files: dict[str, _File] = {}
        pending: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        stop = False
        while not stop:
            try:
                item = self.queue.get(timeout=FLUSH_EVERY_S)
            except queue.Empty:
                item = ("", {})
            if item is None:
                stop = True
            elif item[0]:
                pending[item[0]].append(item[1])
                if len(pending[item[0]]) < ROWS_PER_GROUP:
                    continue
            for table, rows in pending.items():
                try:
                    self._flush(files, table, rows, force_close=stop)
                except (OSError, pa.ArrowException) as exc:
                    self.dropped += len(rows)
                    log.error("writing %s traces failed (%s); %d rows dropped", table, exc, len(rows))
                rows.clear()

    def _flush(self, files: dict[str, _File], table: str, rows: list[dict[str, Any]], *, force_close: bool) -> None:
        f = files.get(table)
        if rows:
            if f is None:
                f = files[table] = _File(self.directory, table)
            f.write(rows)
            self.written += len(rows)
        if f is None:
            return
        too_old = clock.now_ns() - f.opened_ns >= self.rotate_ns
        too_big = os.path.getsize(f.tmp) >= self.rotate_bytes
        if force_close or too_old or too_big:
            f.close()
            self.files_closed += 1
            del files[table]

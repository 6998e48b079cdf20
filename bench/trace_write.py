"""What the trace writer's thread spends on a row, in-process: converting a batch's columns of
Python values to Arrow, and writing them to Parquet (zstd) with every column tried for a
dictionary against only the string columns (``proxy/traces.py`` ``dictionary_columns``).

    python bench/trace_write.py [--rows 30000] [--group 4096]

The rows are ``bench/gen_traces.py``'s (the generator the analysis tests and benches share), as
the proxies write them. Best of 5, µs per row, and the file's size.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.proxy.traces import dictionary_columns

from bench import gen_traces


def write_us(table: pa.Table, group: int, **options: Any) -> tuple[float, int]:
    best = float("inf")
    size = 0
    for _ in range(5):
        buf = io.BytesIO()
        w = pq.ParquetWriter(buf, table.schema, compression="zstd", **options)
        t0 = time.perf_counter()
        for off in range(0, table.num_rows, group):
            w.write_table(table.slice(off, group))
        w.close()
        best = min(best, time.perf_counter() - t0)
        size = len(buf.getvalue())
    return best / table.num_rows * 1e6, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=30_000)
    ap.add_argument("--group", type=int, default=4096, help="rows per write (a row group)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        gen_traces.generate(d, args.rows, seed=3)
        for name in ("exchanges", "partitions"):
            table = pa.concat_tables(pq.read_table(f) for f in sorted(Path(d, name).rglob("*.parquet")))
            table = table.replace_schema_metadata(None)
            columns = {c: table.column(c).to_pylist() for c in table.column_names}
            t0 = time.perf_counter()
            for _ in range(3):
                [pa.array(columns[f.name], type=f.type) for f in table.schema]
            convert = (time.perf_counter() - t0) / 3 / table.num_rows * 1e6
            every, every_size = write_us(table, args.group)
            strings, strings_size = write_us(table, args.group, use_dictionary=dictionary_columns(name))
            print(f"{name:10s} {table.num_rows} rows: convert {convert:.2f} µs/row; write, every column tried for a "
                  f"dictionary {every:.2f} µs/row ({every_size} B), the strings only {strings:.2f} µs/row "
                  f"({strings_size} B)")


if __name__ == "__main__":
    main()

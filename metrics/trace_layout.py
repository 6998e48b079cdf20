"""Where trace files go: the layout shared by the writer (``proxy/traces.py``), the generator
(``bench/gen_traces.py``) and the reader (``analysis/job.py``).

    TRACE_DIR/<table>/date=YYYY-MM-DD/hour=HH/<opened wall ns>-<proxy>-<random>.parquet

- A file holds rows of one UTC hour only (by ``ts_ns``), so a time range reads only the hour
  directories it overlaps (``hours_overlap``), on any filesystem Hadoop lists.
- The name carries the proxy and 8 random hex digits: many sidecars can share one trace
  directory (a directory per proxy or per broker works the same) and no two writers ever open
  the same file.
- Files written before this layout (directly under ``<table>/``) are still read.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid

HOUR_NS = 3600 * 10**9
_PART = re.compile(r"date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def hour_of(ts_ns: int) -> int:
    """The hour (epoch hours, UTC) a row belongs to."""
    return ts_ns // HOUR_NS


def hour_dir(hour: int) -> str:
    """``date=YYYY-MM-DD/hour=HH`` of an epoch hour."""
    t = dt.datetime.fromtimestamp(hour * 3600, dt.UTC)
    return f"date={t:%Y-%m-%d}/hour={t:%H}"


def hour_of_dir(path: str) -> int | None:
    """The epoch hour a ``.../date=YYYY-MM-DD/hour=HH`` directory holds (None: not one)."""
    m = _PART.search(path.rstrip("/"))
    if not m:
        return None
    t = dt.datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H").replace(tzinfo=dt.UTC)
    return int(t.timestamp()) // 3600


def hours_overlap(hour: int, since_ns: int | None, until_ns: int | None) -> bool:
    """Whether hour ``hour`` can hold a row in [since_ns, until_ns)."""
    start, end = hour * HOUR_NS, (hour + 1) * HOUR_NS
    return (since_ns is None or end > since_ns) and (until_ns is None or start < until_ns)


def file_name(opened_wall_ns: int, proxy_id: str) -> str:
    """A name no other writer picks: the open time, the proxy (made path-safe) and 8 random hex digits."""
    proxy = _UNSAFE.sub("_", proxy_id).strip("_") or "proxy"
    return f"{opened_wall_ns}-{proxy}-{uuid.uuid4().hex[:8]}.parquet"


def local_files(trace_dir: str, table: str) -> list[str]:
    """Every whole file of ``table`` under a local trace directory, in either layout, in name
    order (dot files are still being written)."""
    import os

    found = []
    for root, _dirs, names in os.walk(os.path.join(trace_dir, table)):
        found += [os.path.join(root, n) for n in names if n.endswith(".parquet") and not n.startswith((".", "_"))]
    return sorted(found)

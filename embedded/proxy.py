"""``fetchlat proxy`` as a child process, for the tests, the demo and the benchmarks: started
with its output in a log file, ready when its ``/health`` says so, stopped by pid.

Owns: the command line that starts the real proxy process, what "ready" means to a caller,
and how it is stopped (SIGTERM: drained, traces flushed and renamed; SIGKILL if it outlives the wait).
Must never: wait without a bound, or leave a process it started running after ``stop``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ProxyNotReady(RuntimeError):
    """The proxy exited, or did not become ready in time; the message holds its log."""


@dataclass
class ProxyProcess:
    listen_port: int
    metrics_port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/health", timeout=5) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def log(self) -> str:
        return self.log_path.read_text()

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise ProxyNotReady(f"proxy exited: {self.log()}")
        with suppress(OSError, ValueError):
            return bool(self.health().get("ready"))
        return False

    def wait_ready(self, timeout_s: float) -> None:
        """Until ``/health`` says ready; a proxy that never does is stopped, never left behind."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready():
                return
            time.sleep(0.05)
        self.stop()
        raise ProxyNotReady(f"proxy never became ready in {timeout_s:.0f} s: {self.log()}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def start(args: Sequence[str], *, listen_port: int, metrics_port: int, log_path: Path) -> ProxyProcess:
    """``fetchlat proxy ARGS --listen 127.0.0.1:LISTEN --metrics-listen 127.0.0.1:METRICS``,
    its output appended to ``log_path``. Returns at once: call ``wait_ready``."""
    with open(log_path, "ab") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "fetchlat.app", "proxy", *args, "--listen", f"127.0.0.1:{listen_port}",
             "--metrics-listen", f"127.0.0.1:{metrics_port}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return ProxyProcess(listen_port, metrics_port, proc, log_path)

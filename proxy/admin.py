"""Admin HTTP endpoint: /metrics (Prometheus text format), /health, /health/live,
/health/ready. Served from a thread so a scrape never stalls the event loop; bound to
loopback unless configured otherwise."""

from __future__ import annotations

import json
import os
import selectors
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from ..metrics.exposition import render
from .config import HostPort


class _Server(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` whose accept loop sleeps until a connection comes or ``stop``
    is called. socketserver's ``serve_forever`` wakes every half second to look for a shutdown:
    two wake-ups a second of a thread that then takes the interpreter, about a sixth of an idle
    sidecar's CPU (``bench/idle_cpu.py``)."""

    daemon_threads = True
    timeout = 0.0  # handle_request's own wait: the selector below has already seen the socket ready

    def __init__(self, addr: HostPort, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(addr, handler)
        self._wake_r, self._wake_w = os.pipe()

    def serve_until_stopped(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self.socket, selectors.EVENT_READ, "accept")
            sel.register(self._wake_r, selectors.EVENT_READ, "stop")
            while True:
                ready = sel.select()
                if any(key.data == "stop" for key, _ in ready):
                    return
                self.handle_request()  # accepts and hands the connection to its thread, or returns

    def stop(self) -> None:
        os.write(self._wake_w, b"x")

    def server_close(self) -> None:
        super().server_close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)


class AdminServer:
    """``before_scrape``, if given, runs on this endpoint's thread before each /metrics answer
    (the proxy's: what the native core has queued, counted first)."""

    def __init__(self, addr: HostPort, registry: CollectorRegistry, health: Callable[[], dict[str, object]],
                 before_scrape: Callable[[], None] | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    if before_scrape is not None:
                        before_scrape()
                    self._send(200, CONTENT_TYPE_LATEST, render(registry))
                elif path in ("/health", "/health/live", "/health/ready"):
                    h = health()
                    ok = bool(h["ready"] if path == "/health/ready" else h["live"])
                    self._send(200 if ok else 503, "application/json", json.dumps(h).encode())
                else:
                    self._send(404, "text/plain", b"not found: try /metrics or /health\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = _Server(addr, Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_until_stopped, name="fetchlat-admin", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.httpd.stop()
            self.thread.join(5.0)
        self.httpd.server_close()

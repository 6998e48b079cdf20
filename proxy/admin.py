"""Admin HTTP endpoint: /metrics (Prometheus text format), /health, /health/live,
/health/ready. Served from a thread so a scrape never stalls the event loop; bound to
loopback unless configured otherwise."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .config import HostPort


class AdminServer:
    def __init__(self, addr: HostPort, registry: CollectorRegistry, health: Callable[[], dict[str, object]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
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

        self.httpd = ThreadingHTTPServer(addr, Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="fetchlat-admin", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

"""The ``fetchlat`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .config import Config, ConfigError, format_hostport, load_config


def _proxy_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("proxy", help="run the Kafka proxy",
                       description="Proxy Kafka clients to the upstream brokers, measuring every request.")
    p.add_argument("--upstream", help="bootstrap brokers, HOST:PORT[,HOST:PORT] (env FETCHLAT_UPSTREAM)")
    p.add_argument("--listen", help="bootstrap listener HOST:PORT; broker N gets port+1+N (env FETCHLAT_LISTEN)")
    p.add_argument("--advertise-host", dest="advertise_host",
                   help="host clients are told to connect to (default: the listen host, or this machine's name)")
    p.add_argument("--metrics-listen", dest="metrics_listen",
                   help="HOST:PORT for /metrics and /health (default 127.0.0.1:9464)")
    p.add_argument("--trace-dir", dest="trace_dir", help="directory for per-request trace files")
    p.add_argument("--max-frame-bytes", dest="max_frame_bytes", type=int,
                   help="largest Kafka frame accepted (default 104857600)")
    p.add_argument("--log-level", dest="log_level", help="DEBUG, INFO (default), WARNING or ERROR")
    p.add_argument("--wait-time-tag", dest="wait_time_tag", type=int,
                   help="top-level Fetch response tag number a broker uses to report WaitTimeMs (KIP-736)")
    p.add_argument("--sidecar-node", dest="sidecar_node", type=int,
                   help="sidecar mode: front broker N only; brokers advertise their sidecars, so addresses pass "
                        "unchanged and no per-node listeners open (env FETCHLAT_SIDECAR_NODE)")
    p.add_argument("--tls-cert", dest="tls_cert", help="serve TLS to clients with this PEM certificate")
    p.add_argument("--tls-key", dest="tls_key", help="private key of --tls-cert (PEM)")
    p.add_argument("--tls-client-ca", dest="tls_client_ca",
                   help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--upstream-tls", dest="upstream_tls", action="store_const", const=True,
                   help="connect to brokers over TLS")
    p.add_argument("--upstream-ca", dest="upstream_ca", help="CA to verify brokers with (default: system CAs)")
    p.add_argument("--upstream-cert", dest="upstream_cert", help="client certificate towards brokers (mTLS)")
    p.add_argument("--upstream-key", dest="upstream_key", help="private key of --upstream-cert")
    p.add_argument("--config", help="YAML file with the same settings, plus per-node 'nodes:' overrides")


PROXY_KEYS = ("upstream", "listen", "advertise_host", "metrics_listen", "trace_dir", "max_frame_bytes", "log_level",
              "wait_time_tag", "sidecar_node", "tls_cert", "tls_key", "tls_client_ca", "upstream_tls", "upstream_ca",
              "upstream_cert", "upstream_key", "config")


def config_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> Config:
    """The configuration the parsed ``fetchlat proxy`` flags, the environment and the YAML give."""
    return load_config({k: getattr(args, k) for k in PROXY_KEYS}, env=env)


def run_proxy(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        print(f"fetchlat proxy: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvloop
    from fetchlat.metrics.prom import ProxyMetrics

    from .admin import AdminServer
    from .server import Proxy

    metrics = ProxyMetrics()

    async def main() -> int:
        try:
            proxy = Proxy(cfg, metrics)
        except ConfigError as exc:
            print(f"fetchlat proxy: {exc}", file=sys.stderr)
            return 2
        if cfg.trace_dir:
            try:
                proxy.enable_traces(cfg.trace_dir)
            except OSError as exc:
                print(f"fetchlat proxy: cannot write traces to {cfg.trace_dir}: {exc.strerror}; "
                      "choose another --trace-dir", file=sys.stderr)
                return 2
        try:
            await proxy.start()
        except OSError as exc:
            print(f"fetchlat proxy: cannot listen on {format_hostport(cfg.listen)}: {exc.strerror}; "
                  "choose another --listen port", file=sys.stderr)
            return 2
        try:
            admin = AdminServer(cfg.metrics_listen, metrics.registry, proxy.health)
        except OSError as exc:
            print(f"fetchlat proxy: cannot serve metrics on {format_hostport(cfg.metrics_listen)}: "
                  f"{exc.strerror}; choose another --metrics-listen", file=sys.stderr)
            await proxy.stop()
            return 2
        admin.start()
        logging.getLogger("fetchlat.proxy").info("metrics and health on http://%s/metrics",
                                                 format_hostport((cfg.metrics_listen[0], admin.port)))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def reload() -> None:
            try:
                proxy.reload(config_from_args(args))
            except ConfigError as exc:
                logging.getLogger("fetchlat.proxy").error("SIGHUP: configuration not reloaded: %s", exc)

        loop.add_signal_handler(signal.SIGHUP, reload)
        await stop.wait()
        logging.getLogger("fetchlat.proxy").info("stopping: no new connections; draining for up to %.1f s",
                                                 proxy.cfg.drain_timeout_s)
        await proxy.stop(drain_s=proxy.cfg.drain_timeout_s)
        admin.stop()
        return 0

    return uvloop.run(main())


def _demo_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run an embedded broker, the proxy and load; show what it measures")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to run the load (default 60)")
    p.add_argument("--rate", type=int, default=200, help="records per second produced (default 200)")
    p.add_argument("--no-report", dest="no_report", action="store_true",
                   help="skip the closing fetchlat analyze run (Spark)")


def _analyze_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("analyze", help="analyse trace directories with Spark and write a report",
                       description="Read fetchlat traces (local paths, s3a://, hdfs://, ...) and write report.html, "
                                   "summary.json and tables/ to --out.")
    p.add_argument("trace_dirs", nargs="+", metavar="TRACE_DIR")
    p.add_argument("--out", required=True, help="report directory")
    p.add_argument("--master", help="Spark master URL (default local[*]; under spark-submit, spark-submit's)")
    p.add_argument("--since", help="only traces at or after this time (ISO 8601, or epoch seconds)")
    p.add_argument("--until", help="only traces before this time (ISO 8601, or epoch seconds)")
    p.add_argument("--window", default="1m", help="time window for per-window tables (30s, 1m, 5m, 1h; default 1m)")
    p.add_argument("--record-latency-sla", dest="sla", default="5s", help="record latency SLA (e.g. 500ms, 5s)")
    p.add_argument("--top", type=int, default=10, help="how many slowest clients/partitions to list")


def parse_time_ns(text: str | None, what: str) -> int | None:
    import datetime as dt

    if text is None:
        return None
    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"fetchlat analyze: {what} '{text}' is neither ISO 8601 (2026-11-22T05:00:00Z) "
                         "nor epoch seconds") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1e9)


def parse_duration_ms(text: str) -> float:
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m)?\s*", text)
    if not m:
        raise SystemExit(f"fetchlat analyze: duration '{text}' should look like 500ms, 5s or 1m")
    return float(m.group(1)) * {"ms": 1.0, "s": 1000.0, "m": 60000.0, None: 1000.0}[m.group(2)]


def run_analyze(args: argparse.Namespace) -> int:
    try:
        from fetchlat.analysis import job
    except ImportError as exc:
        print(f"fetchlat analyze needs PySpark ({exc}); install it with: pip install 'fetchlat[analysis]'",
              file=sys.stderr)
        return 2
    from rich.console import Console

    console = Console(stderr=True)
    since, until = parse_time_ns(args.since, "--since"), parse_time_ns(args.until, "--until")
    try:
        from fetchlat.analysis.transforms import window_us

        window_us(args.window)
    except ValueError as exc:
        print(f"fetchlat analyze: {exc}", file=sys.stderr)
        return 2
    with console.status("starting Spark") as status:
        summary = job.run(args.trace_dirs, args.out, master=args.master, since_ns=since, until_ns=until,
                          window=args.window, sla_ms=parse_duration_ms(args.sla), top_n=args.top,
                          progress=lambda s: status.update(s))
    import os

    console.print(f"{summary['exchanges_read']:,} exchanges analysed in {summary['seconds']} s; "
                  f"{len(summary['flagged_pairs'])} broker-pair window(s) flagged")
    print(os.path.join(os.path.abspath(args.out), "report.html"))
    return 0


def _perf_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from fetchlat.perf import consume, produce

    p = sub.add_parser("perf", help="producer / consumer performance with µs-precision latency",
                       description="Load generators: fetchlat perf produce | consume (--help on each).")
    perf_sub = p.add_subparsers(dest="perf_command", required=True)
    produce.add_parser(perf_sub)
    consume.add_parser(perf_sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fetchlat", description="True Kafka fetch latency, measured by a proxy.")
    sub = parser.add_subparsers(dest="command", required=True)
    _proxy_parser(sub)
    _demo_parser(sub)
    _analyze_parser(sub)
    _perf_parser(sub)
    return parser


def proxy_config(argv: list[str], env: dict[str, str] | None = None) -> Config:
    """The configuration ``fetchlat proxy ARGV`` would run with (deploy files are checked with it)."""
    return config_from_args(build_parser().parse_args(["proxy", *argv]), env)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "proxy":
        return run_proxy(args)
    if args.command == "analyze":
        return run_analyze(args)
    if args.command == "perf":
        return int(args.perf(args))
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

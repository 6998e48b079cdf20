"""The ``fetchlat`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .config import ConfigError, format_hostport, load_config


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
    p.add_argument("--config", help="YAML file with the same settings, plus per-node 'nodes:' overrides")


def run_proxy(args: argparse.Namespace) -> int:
    try:
        cfg = load_config({k: getattr(args, k) for k in (
            "upstream", "listen", "advertise_host", "metrics_listen", "trace_dir", "max_frame_bytes",
            "log_level", "wait_time_tag", "config")})
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
        proxy = Proxy(cfg, metrics)
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
        await stop.wait()
        await proxy.stop()
        admin.stop()
        return 0

    return uvloop.run(main())


def _demo_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run an embedded broker, the proxy and load; show what it measures")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to run the load (default 60)")
    p.add_argument("--rate", type=int, default=200, help="records per second produced (default 200)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fetchlat", description="True Kafka fetch latency, measured by a proxy.")
    sub = parser.add_subparsers(dest="command", required=True)
    _proxy_parser(sub)
    _demo_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "proxy":
        return run_proxy(args)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

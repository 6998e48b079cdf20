"""The ``fetchlat`` command line: ``proxy`` and ``demo`` parsed here; ``analyze`` and ``perf``
parsed by their own packages (``analysis/cli.py``, ``perf/cli.py``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from fetchlat.analysis import cli as analysis_cli
from fetchlat.capture import run as capture_cli
from fetchlat.perf import cli as perf_cli

from .config import FLAGS, Config, ConfigError, format_hostport, load_config


def _proxy_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("proxy", help="run the Kafka proxy",
                       description="Proxy Kafka clients to the upstream brokers, measuring every request.")
    for st in FLAGS:
        env = f" (env {st.env_key})" if st.env else ""
        if st.kind == "switch":
            p.add_argument(st.option, dest=st.key, action="store_const", const=True, help=st.help + env)
        else:
            p.add_argument(st.option, dest=st.key, type=int if st.kind == "int" else str, help=st.help + env)
    p.add_argument("--config", help="YAML file with the same settings, plus per-node 'nodes:' overrides")


PROXY_KEYS = (*(st.key for st in FLAGS), "config")


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
    from .build import fetchlat_version, hot_path, hot_path_reason
    from .server import Proxy
    from .stamps import stamp_source

    stamps = stamp_source(cfg.stamps)
    metrics = ProxyMetrics(version=fetchlat_version(), hot_path=hot_path(), stamps=stamps)

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
        logging.getLogger("fetchlat.proxy").info(
            "metrics and health on http://%s/metrics; hot path: %s (%s; fetchlat %s); response stamps: %s%s",
            format_hostport((cfg.metrics_listen[0], admin.port)), hot_path(), hot_path_reason(), fetchlat_version(),
            stamps, " (the kernel's receive time per packet)" if stamps == "kernel" else
            (" (kernel stamps need Linux)" if cfg.stamps == "kernel" else " (asked for with --stamps clock)"))
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
    p.add_argument("--broker", choices=("tansu", "kafka"), default=os.environ.get("FETCHLAT_DEMO_BROKER", "tansu"),
                   help="tansu: one embedded Tansu behind one proxy (default); kafka: Apache Kafka, 3 brokers "
                        "each behind its own sidecar, replication latency on screen (env FETCHLAT_DEMO_BROKER)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fetchlat", description="True Kafka fetch latency, measured by a proxy.")
    sub = parser.add_subparsers(dest="command", required=True)
    _proxy_parser(sub)
    _demo_parser(sub)
    analysis_cli.add_parser(sub)
    perf_cli.add_parser(sub)
    capture_cli.add_parser(sub)
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
        return int(analysis_cli.run(args))
    if args.command == "perf":
        return int(perf_cli.run(args))
    if args.command == "pcap":
        return int(capture_cli.run(args))
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

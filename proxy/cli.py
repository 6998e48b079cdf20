"""``fetchlat proxy``: its flags (from ``config.FLAGS``, the one table of settings), and the run
of one proxy process: the server, the admin endpoint, the signals (SIGTERM drains, SIGHUP
reloads). The ``fetchlat`` command's dispatch is ``app/cli.py``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys

from .config import FLAGS, Config, ConfigError, format_hostport, load_config


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("proxy", help="run the Kafka proxy",
                       description="Proxy Kafka clients to the upstream brokers, measuring every request.")
    for st in FLAGS:
        env = f" (env {st.env_key})" if st.env else ""
        if st.kind == "switch":
            p.add_argument(st.option, dest=st.key, action="store_const", const=True, help=st.help + env)
        else:
            metavar = "{" + ",".join(v.lower() for v in st.choices) + "}" if st.choices else None
            p.add_argument(st.option, dest=st.key, type=int if st.kind == "int" else str, metavar=metavar,
                           help=st.help + env)
    p.add_argument("--config", help="YAML file with the same settings, plus per-node 'nodes:' overrides")
    p.add_argument("--check-config", dest="check_config", action="store_true",
                   help="check the settings (flags, environment, --config, TLS files) and print the effective "
                        "ones, without starting; exit status 2 if one is wrong")


PROXY_KEYS = (*(st.key for st in FLAGS), "config")


def config_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> Config:
    """The configuration the parsed ``fetchlat proxy`` flags, the environment and the YAML give."""
    return load_config({k: getattr(args, k) for k in PROXY_KEYS}, env=env)


def check_config(cfg: Config) -> int:
    """``--check-config``: the TLS files read as the proxy would, then every effective setting,
    one ``key: value`` a line (YAML), on stdout."""
    from .tls import client_context, server_context

    try:
        server_context(cfg)
        client_context(cfg)
    except ConfigError as exc:
        print(f"fetchlat proxy: {exc}", file=sys.stderr)
        return 2
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, tuple) and value and isinstance(value[0], tuple):  # host:port lists
            value = [format_hostport(v) for v in value]
        elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int) and f.name.endswith("listen"):
            value = format_hostport(value)
        print(f"{f.name}: {json.dumps(value, default=str)}")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        print(f"fetchlat proxy: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        return check_config(cfg)
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvloop

    from ..metrics.prom import ProxyMetrics
    from .admin import AdminServer
    from .build import fetchlat_version, hot_path, hot_path_reason
    from .interpreter import share_interpreter
    from .memory import census, settle_heap
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
            admin = AdminServer(cfg.metrics_listen, metrics.registry, proxy.health, proxy.heartbeat.settle)
        except OSError as exc:
            print(f"fetchlat proxy: cannot serve metrics on {format_hostport(cfg.metrics_listen)}: "
                  f"{exc.strerror}; choose another --metrics-listen", file=sys.stderr)
            await proxy.stop()
            return 2
        share_interpreter()  # the loop waits at most 1 ms for a scrape or the writer (proxy/interpreter.py)
        admin.start()
        settled = settle_heap()  # the startup heap, out of every full collection's walk (proxy/memory.py)
        logging.getLogger("fetchlat.proxy").info(
            "metrics and health on http://%s/metrics; hot path: %s (%s; fetchlat %s)%s; response stamps: %s%s; "
            "%d startup objects frozen out of the collector's walk",
            format_hostport((cfg.metrics_listen[0], admin.port)), hot_path(), hot_path_reason(), fetchlat_version(),
            "; connections read by the routed road (FETCHLAT_ROUTED=1)" if proxy.core.routed else "",
            stamps, " (the kernel's receive time per packet)" if stamps == "kernel" else
            (" (kernel stamps need Linux)" if cfg.stamps == "kernel" else " (asked for with --stamps clock)"),
            settled)
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
        loop.add_signal_handler(signal.SIGUSR1, lambda: logging.getLogger("fetchlat.proxy").info(
            "%s", census()))  # what the heap holds, on demand (docs/operations.md)
        await stop.wait()
        logging.getLogger("fetchlat.proxy").info("stopping: no new connections; draining for up to %.1f s",
                                                 proxy.cfg.drain_timeout_s)
        await proxy.stop(drain_s=proxy.cfg.drain_timeout_s)
        admin.stop()
        return 0

    return uvloop.run(main())


def proxy_config(argv: list[str], env: dict[str, str] | None = None) -> Config:
    """The configuration ``fetchlat proxy ARGV`` would run with (deploy files are checked with it)."""
    parser = argparse.ArgumentParser(prog="fetchlat")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return config_from_args(parser.parse_args(["proxy", *argv]), env)

"""Proxy configuration: defaults < YAML file < environment (FETCHLAT_*) < CLI flags.

A wrong setting raises ``ConfigError`` at start-up with the fix in the message.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..metrics.model import DEFAULT_EXPIRY_OVERSHOOT_NS
from ..protocol.framing import DEFAULT_MAX_FRAME_BYTES

RELAY_CHOICES = ("auto", "native", "off")
STAMP_CHOICES = ("kernel", "clock")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_RELAY = "auto"  # who carries client connections after their first answer (proxy/relayed.py):
# the native core where it is built, since the seventeenth soak held the relay road's memory flat
# (docs/reliability.md) and it costs less than the event loop's road (docs/performance.md)

DEFAULT_METRICS_LISTEN = "127.0.0.1:9464"


class ConfigError(Exception):
    """A setting is wrong; raised at start-up with the fix in the message."""


HostPort = tuple[str, int]


def parse_hostport(text: str, what: str) -> HostPort:
    text = str(text).strip()
    if text.startswith("["):  # [::1]:9092
        host, _, rest = text[1:].partition("]")
        port_text = rest.lstrip(":")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ConfigError(f"{what}: '{text}' has no port; write it as HOST:PORT, e.g. 127.0.0.1:9092")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"{what}: port '{port_text}' in '{text}' is not a number; write HOST:PORT") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{what}: port {port} in '{text}' is outside 0-65535")
    if not host:
        raise ConfigError(f"{what}: '{text}' has no host; write HOST:PORT, e.g. 0.0.0.0:{port} to listen everywhere")
    return host, port


def format_hostport(hp: HostPort) -> str:
    host, port = hp
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class NodeOverride:
    listen: HostPort | None = None  # local listener for this node (None: default port, or none if remote)
    advertise: HostPort | None = None  # what clients are told to connect to for this node
    remote: bool = False  # served by another proxy (sidecar elsewhere): no local listener


@dataclass(frozen=True)
class Config:
    upstreams: tuple[HostPort, ...]
    listen: HostPort
    advertise_host: str
    metrics_listen: HostPort = ("127.0.0.1", 9464)
    trace_dir: str | None = None
    trace_rotate_s: float = 300.0  # close (rename into place) trace files this often
    nodes: dict[int, NodeOverride] = field(default_factory=dict)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    connect_timeout_s: float = 10.0
    metadata_refresh_s: float = 30.0
    topic_refresh_s: float = 300.0  # ask for every topic this often: what is held of deleted topics goes
    log_level: str = "INFO"
    wait_time_tag: int | None = None  # top-level Fetch response tag carrying a broker's WaitTimeMs
    # the broker's purgatory timer lateness; None: the proxy learns it (proxy/calibration.py)
    expiry_overshoot_ms: float | None = None
    calibration_every_s: float = 30.0  # how often the proxy probes its broker once learned (proxy/calibration.py)
    proxy_id: str | None = None  # names this proxy in traces (default host:listen_port)
    idle_timeout_s: float = 600.0  # a client connection with nothing in flight and no bytes (Kafka: 9 min)
    partial_frame_timeout_s: float = 30.0  # a request begun and never finished (slowloris)
    stalled_client_timeout_s: float = 60.0  # a client that stopped reading its responses
    drain_timeout_s: float = 10.0  # on SIGTERM: how long requests already sent may take to finish
    upstream_hold_timeout_s: float = 15.0  # broker unreachable: hold a client's requests this long, retrying
    # sidecar mode: this proxy fronts broker ``sidecar_node`` only, and every broker advertises
    # its own sidecar, so addresses pass unchanged and no per-node listeners are opened
    sidecar_node: int | None = None
    # TLS towards clients: every listener of this proxy serves TLS with this certificate; with
    # tls_client_ca set, clients must present a certificate signed by it (mTLS)
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    # TLS towards brokers: verify them against upstream_ca (default: the system's CAs) and,
    # with upstream_cert/upstream_key, present a client certificate (mTLS)
    upstream_tls: bool = False
    upstream_ca: str | None = None
    upstream_cert: str | None = None
    upstream_key: str | None = None
    upstream_server_hostname: str | None = None  # name to verify instead of the broker's host
    stamps: str = "kernel"  # where responses' receive stamps come from: kernel (where possible) or clock
    # who carries client connections after their first answer, in every placement: the native core's
    # relay (proxy/relayed.py; auto: where it can, native: and say so where it cannot) or, off,
    # the event loop all the way
    relay: str = DEFAULT_RELAY
    # a thread that reads where the proxy's threads are when the loop's tick comes late
    # (proxy/loop_probe.py: counted and logged; off by default)
    loop_probe: bool = False

    def node_listen(self, node_id: int) -> HostPort | None:
        o = self.nodes.get(node_id)
        if o is not None and o.remote:
            return None
        if o is not None and o.listen is not None:
            return o.listen
        return (self.listen[0], self.listen[1] + 1 + node_id)

    def node_advertise(self, node_id: int) -> HostPort:
        o = self.nodes.get(node_id)
        if o is not None and o.advertise is not None:
            return o.advertise
        listen = self.node_listen(node_id)
        if listen is None:  # validated at load: a remote node always has an advertise address
            raise ConfigError(f"node {node_id} is remote but has no advertise address")
        return (self.advertise_host, listen[1])

    @property
    def expiry_overshoot_ns(self) -> int:
        """What the model starts with: the setting, or the default (a sidecar then learns its broker's)."""
        ms = self.expiry_overshoot_ms
        return DEFAULT_EXPIRY_OVERSHOOT_NS if ms is None else round(ms * 1e6)

    @property
    def sidecar(self) -> bool:
        return self.sidecar_node is not None


@dataclass(frozen=True)
class Setting:
    """One setting: its YAML key (also its ``Config`` field, but ``upstream`` -> ``upstreams``),
    its command-line flag (None: YAML only), whether ``FETCHLAT_<KEY>`` sets it, whether a
    SIGHUP applies it to a running proxy, and its help."""

    key: str
    help: str
    flag: bool = False
    kind: str = "str"  # the flag's type: str, int, or switch (no value)
    env: bool = False
    reloadable: bool = False
    choices: tuple[str, ...] = ()  # its values, where it has a fixed set (--help lists them)

    @property
    def option(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def env_key(self) -> str:
        return "FETCHLAT_" + self.key.upper()


# The one table of settings: flags, environment keys, YAML keys and the reloadable set derive from it.
SETTINGS: tuple[Setting, ...] = (
    Setting("upstream", "bootstrap brokers, HOST:PORT[,HOST:PORT]", flag=True, env=True),
    Setting("listen", "bootstrap listener HOST:PORT; broker N gets port+1+N", flag=True, env=True),
    Setting("advertise_host", "host clients are told to connect to (default: the listen host, or this machine's "
                              "name)", flag=True, env=True),
    Setting("metrics_listen", f"HOST:PORT for /metrics and /health (default {DEFAULT_METRICS_LISTEN})", flag=True,
            env=True),
    Setting("trace_dir", "directory for per-request trace files", flag=True, env=True),
    Setting("trace_rotate_s", "close trace files (readers see them) after this many seconds (default 300)",
            flag=True, env=True),
    Setting("max_frame_bytes", f"largest Kafka frame accepted (default {DEFAULT_MAX_FRAME_BYTES})", flag=True,
            kind="int", env=True),
    Setting("log_level", "DEBUG, INFO (default), WARNING or ERROR", flag=True, env=True, reloadable=True,
            choices=LOG_LEVELS),
    Setting("wait_time_tag", "top-level Fetch response tag number a broker uses to report WaitTimeMs (KIP-736)",
            flag=True, kind="int", env=True),
    Setting("expiry_overshoot_ms", "how long past max wait the broker's purgatory timer releases an expired fetch; "
                                   "the proxy learns it from probes of its own unless this is set (default until "
                                   f"then: {DEFAULT_EXPIRY_OVERSHOOT_NS / 1e6:g}"
                                   ", Apache Kafka's 1 ms timer tick; docs/latency-model.md)", flag=True, env=True),
    Setting("calibration_every_s", "how often the proxy probes its (bootstrap) broker to follow its expiry "
                                   "overshoot once learned (default 30; every 0.1 s until it holds 31 samples; two "
                                   "fetches of its own on a connection of its own)"),
    Setting("sidecar_node", "sidecar mode: front broker N only; brokers advertise their sidecars, so addresses "
                            "pass unchanged and no per-node listeners open", flag=True, kind="int", env=True),
    Setting("tls_cert", "serve TLS to clients with this PEM certificate", flag=True, env=True),
    Setting("tls_key", "private key of --tls-cert (PEM)", flag=True, env=True),
    Setting("tls_client_ca", "require client certificates signed by this CA (mTLS)", flag=True, env=True),
    Setting("upstream_tls", "connect to brokers over TLS", flag=True, kind="switch", env=True),
    Setting("upstream_ca", "CA to verify brokers with (default: system CAs)", flag=True, env=True),
    Setting("upstream_cert", "client certificate towards brokers (mTLS)", flag=True, env=True),
    Setting("upstream_key", "private key of --upstream-cert", flag=True, env=True),
    Setting("upstream_server_hostname", "name to verify brokers' certificates against instead of their host"),
    Setting("stamps", "where a response's receive time comes from: kernel (each packet's arrival, Linux "
                      "SO_TIMESTAMPNS; the default, clock where it is not possible) or clock (read when the event "
                      "loop gets to it)", flag=True, env=True, choices=STAMP_CHOICES),
    Setting("relay", "who carries client connections (plaintext or TLS) after their first answer: auto (the native "
                     "core's own thread where it is built, with Python off the per-read road; docs/proxy.md), "
                     "native (the same, with a warning where it cannot), off (the event loop all the way); "
                     f"default {DEFAULT_RELAY}", flag=True, env=True, choices=RELAY_CHOICES),
    Setting("loop_probe", "when the event loop's once-a-second tick is 5 ms late, read what the proxy's threads "
                          "are running (code locations only) and count and log it: the loop busy, or waiting for a "
                          "core or the interpreter (fetchlat_event_loop_late_ticks_total; off by default)",
            flag=True, kind="switch", env=True),
    Setting("proxy_id", "names this proxy in traces (default host:listen_port)"),
    Setting("nodes", "per-node overrides: {id: {listen: HOST:PORT, advertise: HOST:PORT, remote: bool}}"),
    Setting("connect_timeout_s", "how long one connection attempt to a broker may take (default 10)"),
    Setting("metadata_refresh_s", "how often broker metadata is re-read (default 30)", reloadable=True),
    Setting("topic_refresh_s", "how often every topic's id and leaders are re-read while the proxy holds state "
                               "for some partition; what it holds of deleted topics then goes (default 300)",
            reloadable=True),
    Setting("idle_timeout_s", "close a client connection idle this long (default 600)", reloadable=True),
    Setting("partial_frame_timeout_s", "close a client that began a request and did not finish it (default 30)",
            reloadable=True),
    Setting("stalled_client_timeout_s", "close a client that stopped reading its responses (default 60)",
            reloadable=True),
    Setting("drain_timeout_s", "on SIGTERM, how long requests already sent may take (default 10)", reloadable=True),
    Setting("upstream_hold_timeout_s", "hold a client's requests this long while its broker is unreachable "
                                       "(default 15)", reloadable=True),
)
ENV_KEYS = {s.key: s.env_key for s in SETTINGS if s.env}
KNOWN_KEYS = {s.key for s in SETTINGS}
FLAGS = tuple(s for s in SETTINGS if s.flag)
# settings a SIGHUP applies to a running proxy; every other change needs a restart
RELOADABLE = frozenset(s.key for s in SETTINGS if s.reloadable)
TIMEOUT_KEYS = ("idle_timeout_s", "partial_frame_timeout_s", "stalled_client_timeout_s", "drain_timeout_s",
                "upstream_hold_timeout_s")


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the top level must be a mapping of settings")
    unknown = set(data) - KNOWN_KEYS
    if unknown:
        raise ConfigError(
            f"--config {path}: unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KNOWN_KEYS))}"
        )
    return {k.replace("-", "_"): v for k, v in data.items()}


def _positive_int(value: Any, what: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: '{value}' is not a whole number") from None
    if n <= 0:
        raise ConfigError(f"{what}: must be positive, got {n}")
    return n


def _positive_float(value: Any, what: str, *, unit: str = "seconds", zero_ok: bool = False) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: '{value}' is not a number of {unit}") from None
    if zero_ok and not f >= 0:
        raise ConfigError(f"{what}: must be 0 or more, got {f}")
    if not zero_ok and f <= 0:
        raise ConfigError(f"{what}: must be positive, got {f}")
    return f


def _tag(raw: Any) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        tag = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"wait_time_tag: '{raw}' is not a tag number (a whole number >= 0)") from None
    if tag < 0:
        raise ConfigError(f"wait_time_tag: {tag} is negative; tag numbers start at 0")
    return tag


def _relay(raw: Any) -> str:
    value = str(raw).strip().lower()
    if value not in RELAY_CHOICES:
        raise ConfigError(f"relay: '{raw}' is not one of {', '.join(RELAY_CHOICES)}")
    return value


def _stamps(raw: Any) -> str:
    value = str(raw).strip().lower()
    if value not in STAMP_CHOICES:
        raise ConfigError(f"stamps: '{raw}' is not one of {', '.join(STAMP_CHOICES)}")
    return value


def _node_id(raw: Any) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        n = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"sidecar_node: '{raw}' is not a broker node id (a whole number)") from None
    if n < 0:
        raise ConfigError(f"sidecar_node: {n} is negative; broker node ids start at 0")
    return n


def _bool(raw: Any, what: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off", "none"):
        return False
    raise ConfigError(f"{what}: '{raw}' is not true or false")


def _readable(path: Any, what: str) -> str | None:
    if path is None or path == "":
        return None
    p = str(path)
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {p} ({exc.strerror}); give the path of a PEM file") from None
    return p


def _nodes(raw: Any) -> dict[int, NodeOverride]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("nodes: must map node ids to {listen: HOST:PORT, advertise: HOST:PORT, remote: bool}")
    out: dict[int, NodeOverride] = {}
    for key, spec in raw.items():
        try:
            node_id = int(key)
        except ValueError:
            raise ConfigError(f"nodes: key '{key}' is not a node id (a whole number)") from None
        if not isinstance(spec, dict) or set(spec) - {"listen", "advertise", "remote"}:
            raise ConfigError(f"nodes.{node_id}: use only listen: HOST:PORT, advertise: HOST:PORT, remote: true|false")
        listen = parse_hostport(spec["listen"], f"nodes.{node_id}.listen") if spec.get("listen") else None
        adv = parse_hostport(spec["advertise"], f"nodes.{node_id}.advertise") if spec.get("advertise") else None
        remote = bool(spec.get("remote", False))
        if remote and adv is None:
            raise ConfigError(f"nodes.{node_id}: a remote node needs 'advertise: HOST:PORT' (its sidecar's address)")
        if remote and listen is not None:
            raise ConfigError(f"nodes.{node_id}: a remote node has no local listener; drop 'listen' or 'remote'")
        out[node_id] = NodeOverride(listen=listen, advertise=adv, remote=remote)
    return out


def load_config(cli: dict[str, Any], env: dict[str, str] | None = None) -> Config:
    """Merge the sources. ``cli`` holds flag values (None when not given), and ``config``."""
    env = dict(os.environ) if env is None else env
    merged: dict[str, Any] = {}
    if cli.get("config"):
        merged.update(_read_yaml(cli["config"]))
    for key, var in ENV_KEYS.items():
        if env.get(var):
            merged[key] = env[var]
    for key, value in cli.items():
        if key != "config" and value is not None:
            merged[key] = value

    raw_up = merged.get("upstream")
    if not raw_up:
        raise ConfigError("no upstream brokers: pass --upstream HOST:PORT[,HOST:PORT] (or FETCHLAT_UPSTREAM)")
    items = raw_up if isinstance(raw_up, list) else str(raw_up).split(",")
    upstreams = tuple(parse_hostport(u, "--upstream") for u in items if str(u).strip())
    if not merged.get("listen"):
        raise ConfigError("no listen address: pass --listen HOST:PORT, e.g. --listen 0.0.0.0:19092")
    listen = parse_hostport(merged["listen"], "--listen")
    metrics_listen = parse_hostport(merged.get("metrics_listen") or DEFAULT_METRICS_LISTEN, "--metrics-listen")
    adv = merged.get("advertise_host")
    if not adv:
        adv = listen[0] if listen[0] not in ("0.0.0.0", "::", "") else socket.getfqdn()
    level = str(merged.get("log_level", "INFO")).upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"log_level: '{level}' is not one of {', '.join(LOG_LEVELS)}")
    cfg = Config(
        upstreams=upstreams,
        listen=listen,
        advertise_host=str(adv),
        metrics_listen=metrics_listen,
        trace_dir=merged.get("trace_dir"),
        trace_rotate_s=_positive_float(merged.get("trace_rotate_s", 300.0), "trace_rotate_s"),
        nodes=_nodes(merged.get("nodes")),
        max_frame_bytes=_positive_int(merged.get("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES), "max_frame_bytes"),
        connect_timeout_s=float(merged.get("connect_timeout_s", 10.0)),
        metadata_refresh_s=float(merged.get("metadata_refresh_s", 30.0)),
        topic_refresh_s=_positive_float(merged.get("topic_refresh_s", 300.0), "topic_refresh_s"),
        log_level=level,
        wait_time_tag=_tag(merged.get("wait_time_tag")),
        expiry_overshoot_ms=None if merged.get("expiry_overshoot_ms") is None else _positive_float(
            merged["expiry_overshoot_ms"], "expiry_overshoot_ms", unit="milliseconds", zero_ok=True),
        calibration_every_s=_positive_float(merged.get("calibration_every_s", 30.0), "calibration_every_s"),
        proxy_id=merged.get("proxy_id"),
        sidecar_node=_node_id(merged.get("sidecar_node")),
        tls_cert=_readable(merged.get("tls_cert"), "tls_cert"),
        tls_key=_readable(merged.get("tls_key"), "tls_key"),
        tls_client_ca=_readable(merged.get("tls_client_ca"), "tls_client_ca"),
        upstream_tls=_bool(merged.get("upstream_tls", False), "upstream_tls"),
        loop_probe=_bool(merged.get("loop_probe", False), "loop_probe"),
        upstream_ca=_readable(merged.get("upstream_ca"), "upstream_ca"),
        upstream_cert=_readable(merged.get("upstream_cert"), "upstream_cert"),
        upstream_key=_readable(merged.get("upstream_key"), "upstream_key"),
        upstream_server_hostname=merged.get("upstream_server_hostname") or None,
        stamps=_stamps(merged.get("stamps", "kernel")),
        relay=_relay(merged.get("relay", DEFAULT_RELAY)),
        **{k: _positive_float(merged[k], k) for k in TIMEOUT_KEYS if k in merged},
    )
    for node_id in cfg.nodes:
        lp = cfg.node_listen(node_id)
        if lp is not None and not 0 < lp[1] <= 65535:
            raise ConfigError(f"node {node_id}: listener port {lp[1]} is out of range; set nodes.{node_id}.listen")
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        raise ConfigError("tls_cert and tls_key go together: give both (PEM certificate and its private key)")
    if cfg.tls_client_ca and not cfg.tls_cert:
        raise ConfigError("tls_client_ca (mTLS) needs tls_cert and tls_key: the listeners must serve TLS first")
    if bool(cfg.upstream_cert) != bool(cfg.upstream_key):
        raise ConfigError("upstream_cert and upstream_key go together: give both for a client certificate")
    if (cfg.upstream_ca or cfg.upstream_cert) and not cfg.upstream_tls:
        raise ConfigError("upstream_ca / upstream_cert are set but upstream_tls is off: add upstream_tls: true")
    if cfg.sidecar and cfg.nodes:
        raise ConfigError("sidecar_node and nodes: exclude each other: a sidecar opens no per-node listeners "
                          "(every broker advertises its own sidecar); drop one of them")
    return cfg

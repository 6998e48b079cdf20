"""Configuration: CLI flags over environment over YAML over defaults; every wrong setting
fails at start with a message that says how to fix it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fetchlat.proxy.config import ConfigError, load_config


def cli(**kw: object) -> dict[str, object]:
    keys = ("upstream", "listen", "advertise_host", "metrics_listen", "trace_dir", "max_frame_bytes", "log_level",
            "wait_time_tag", "sidecar_node", "tls_cert", "tls_key", "tls_client_ca", "upstream_tls", "upstream_ca",
            "upstream_cert", "upstream_key", "config")
    base: dict[str, object] = dict.fromkeys(keys)
    base.update(kw)
    return base


def test_defaults_and_port_scheme() -> None:
    cfg = load_config(cli(upstream="b1:9092,b2:9092", listen="127.0.0.1:19092"), env={})
    assert cfg.upstreams == (("b1", 9092), ("b2", 9092))
    assert cfg.metrics_listen == ("127.0.0.1", 9464)  # admin endpoint on loopback by default
    assert cfg.node_listen(7) == ("127.0.0.1", 19100)
    assert cfg.node_advertise(7) == ("127.0.0.1", 19100)


def test_precedence_yaml_env_cli(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("upstream: [y:1]\nlisten: 0.0.0.0:100\nadvertise_host: from-yaml\nmax_frame_bytes: 1000\n")
    env = {"FETCHLAT_ADVERTISE_HOST": "from-env", "FETCHLAT_LISTEN": "0.0.0.0:200"}
    cfg = load_config(cli(config=str(f), listen="0.0.0.0:300"), env=env)
    assert cfg.upstreams == (("y", 1),)
    assert cfg.advertise_host == "from-env"
    assert cfg.listen == ("0.0.0.0", 300)
    assert cfg.max_frame_bytes == 1000


def test_node_overrides(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("upstream: b:1\nlisten: 0.0.0.0:9000\nadvertise_host: me\nnodes:\n"
                 "  1: {listen: '0.0.0.0:9092', advertise: 'me:9092'}\n  2: {remote: true, advertise: 'other:9092'}\n")
    cfg = load_config(cli(config=str(f)), env={})
    assert cfg.node_listen(1) == ("0.0.0.0", 9092) and cfg.node_advertise(1) == ("me", 9092)
    assert cfg.node_listen(2) is None and cfg.node_advertise(2) == ("other", 9092)
    assert cfg.node_advertise(3) == ("me", 9004)


@pytest.mark.parametrize(("kw", "yaml_text", "message"), [
    ({}, None, "pass --upstream"),
    ({"upstream": "b:1"}, None, "pass --listen"),
    ({"upstream": "nohost", "listen": "x:1"}, None, "has no port"),
    ({"upstream": "b:port", "listen": "x:1"}, None, "is not a number"),
    ({"upstream": "b:70000", "listen": "x:1"}, None, "outside 0-65535"),
    ({"upstream": "b:1", "listen": ":1"}, None, "has no host"),
    ({"upstream": "b:1", "listen": "x:1", "max_frame_bytes": -5}, None, "must be positive"),
    ({"upstream": "b:1", "listen": "x:1", "log_level": "chatty"}, None, "is not one of"),
    ({}, "upstream: b:1\nlisten: x:1\nlisten_port: 3\n", "unknown setting(s) listen_port"),
    ({}, "- a\n- b\n", "must be a mapping"),
    ({}, "upstream: b:1\nlisten: x:1\nnodes: {2: {remote: true}}\n", "needs 'advertise: HOST:PORT'"),
    ({}, "upstream: b:1\nlisten: x:1\nnodes: {two: {}}\n", "is not a node id"),
    ({}, "upstream: [b:1\n", "not valid YAML"),
    ({"upstream": "b:1", "listen": "x:1", "sidecar_node": "one"}, None, "is not a broker node id"),
    ({"upstream": "b:1", "listen": "x:1", "tls_cert": "/nonexistent.pem"}, None, "cannot read /nonexistent.pem"),
    ({"upstream": "b:1", "listen": "x:1", "upstream_tls": "maybe"}, None, "is not true or false"),
    ({"upstream": "b:1", "listen": "x:1", "upstream_ca": "/etc/hostname"}, None, "add upstream_tls: true"),
    ({"upstream": "b:1", "listen": "x:1", "tls_cert": "/etc/hostname"}, None, "go together"),
    ({}, "upstream: b:1\nlisten: x:1\nsidecar_node: 1\nnodes: {2: {remote: true, advertise: 'o:1'}}\n",
     "exclude each other"),
])
def test_wrong_settings_say_how_to_fix_them(tmp_path: Path, kw: dict[str, object], yaml_text: str | None,
                                            message: str) -> None:
    if yaml_text is not None:
        f = tmp_path / "bad.yaml"
        f.write_text(yaml_text)
        kw = {**kw, "config": str(f)}
    with pytest.raises(ConfigError) as err:
        load_config(cli(**kw), env={})
    assert message in str(err.value)


def test_cli_fails_at_start_with_the_fix() -> None:
    r = subprocess.run([sys.executable, "-m", "fetchlat.app", "proxy", "--listen", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "pass --upstream HOST:PORT" in r.stderr


def test_timeouts_from_yaml(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("upstream: b:1\nlisten: x:1\nidle_timeout_s: 5\npartial_frame_timeout_s: 0.5\n")
    cfg = load_config(cli(config=str(f)), env={})
    assert (cfg.idle_timeout_s, cfg.partial_frame_timeout_s, cfg.stalled_client_timeout_s) == (5.0, 0.5, 60.0)
    f.write_text("upstream: b:1\nlisten: x:1\nidle_timeout_s: -1\n")
    with pytest.raises(ConfigError, match="idle_timeout_s: must be positive"):
        load_config(cli(config=str(f)), env={})


def test_sidecar_node_from_env_and_yaml(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("upstream: 127.0.0.1:29092\nlisten: 0.0.0.0:9092\nsidecar_node: 2\n")
    assert load_config(cli(config=str(f)), env={}).sidecar_node == 2
    cfg = load_config(cli(upstream="b:1", listen="x:1"), env={"FETCHLAT_SIDECAR_NODE": "3"})
    assert cfg.sidecar and cfg.sidecar_node == 3
    assert not load_config(cli(upstream="b:1", listen="x:1"), env={}).sidecar


def test_relay_by_default_and_when_asked() -> None:
    from fetchlat.proxy.config import DEFAULT_RELAY

    assert load_config(cli(upstream="b:1", listen="x:1"), env={}).relay == DEFAULT_RELAY
    assert load_config(cli(upstream="b:1", listen="x:1"), env={"FETCHLAT_RELAY": "Native"}).relay == "native"
    assert load_config(cli(upstream="b:1", listen="x:1", relay="off"), env={"FETCHLAT_RELAY": "auto"}).relay == "off"
    with pytest.raises(ConfigError, match="relay: 'uring' is not one of auto, native, off"):
        load_config(cli(upstream="b:1", listen="x:1", relay="uring"), env={})


def test_stamps_kernel_by_default_clock_when_asked() -> None:
    assert load_config(cli(upstream="b:1", listen="x:1"), env={}).stamps == "kernel"
    assert load_config(cli(upstream="b:1", listen="x:1"), env={"FETCHLAT_STAMPS": "Clock"}).stamps == "clock"
    with pytest.raises(ConfigError, match="stamps: 'wall' is not one of kernel, clock"):
        load_config(cli(upstream="b:1", listen="x:1", stamps="wall"), env={})


def test_every_setting_is_in_the_one_table() -> None:
    """Flags, environment keys, YAML keys and the reloadable set all come from config.SETTINGS,
    and every Config field is one of them (``upstream`` fills ``upstreams``)."""
    import dataclasses

    from fetchlat.app.cli import build_parser
    from fetchlat.proxy.cli import PROXY_KEYS
    from fetchlat.proxy.config import ENV_KEYS, FLAGS, KNOWN_KEYS, RELOADABLE, SETTINGS, Config

    fields = {f.name for f in dataclasses.fields(Config)} - {"upstreams"} | {"upstream"}
    assert {s.key for s in SETTINGS} == fields == KNOWN_KEYS
    assert set(PROXY_KEYS) == {s.key for s in FLAGS} | {"config"}
    assert all(v == "FETCHLAT_" + k.upper() for k, v in ENV_KEYS.items())
    assert fields >= RELOADABLE and "upstream" not in RELOADABLE and "tls_cert" not in RELOADABLE
    text = build_parser().format_help() + build_parser()._subparsers._group_actions[0].choices["proxy"].format_help()
    for s in FLAGS:
        assert s.option in text

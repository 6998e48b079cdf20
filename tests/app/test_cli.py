"""The ``fetchlat`` command: one parser made of the subcommands each package owns, every pinned
command in it, and the module entry point (``python -m fetchlat.app``) the same command."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fetchlat.app.cli import build_parser, main

PINNED = ("proxy", "demo", "analyze", "perf", "pcap", "verify")


def test_every_pinned_command_is_in_the_one_parser() -> None:
    sub = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    assert tuple(sub.choices) == PINNED


def test_a_missing_command_is_refused_with_the_list() -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_the_module_is_the_command() -> None:
    r = subprocess.run([sys.executable, "-m", "fetchlat.app", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert "{proxy,demo,analyze,perf,pcap,verify}" in r.stdout


def test_version_says_the_version_and_the_build() -> None:
    from fetchlat.proxy.build import HOT_PATHS, fetchlat_version

    r = subprocess.run([sys.executable, "-m", "fetchlat.app", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"fetchlat {fetchlat_version()} (hot path: ")
    assert r.stdout.split("hot path: ")[1].split(";")[0] in HOT_PATHS


def test_every_setting_with_a_fixed_set_of_values_lists_them_in_help() -> None:
    from fetchlat.proxy.config import FLAGS

    sub = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    text = sub.choices["proxy"].format_help()
    fixed = [st for st in FLAGS if st.choices]
    assert {st.key for st in fixed} >= {"relay", "stamps", "log_level"}
    for st in fixed:
        assert f"{st.option} {{{','.join(v.lower() for v in st.choices)}}}" in text, st.key


def test_a_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import confluent_kafka: ModuleNotFoundError
    code = main(["perf", "produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--num-records", "1"])
    assert code == 2
    assert "pip install 'fetchlat[perf]'" in capsys.readouterr().err


def test_every_usage_error_exits_2(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["analyze", "/nonexistent", "--out", "/tmp/x", "--since", "yesterday"],
                 ["analyze", "/nonexistent", "--out", "/tmp/x", "--record-latency-sla", "soon"],
                 ["proxy", "--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:0", "--relay", "fast"],
                 ["proxy", "--listen", "127.0.0.1:0"],
                 ["pcap"]):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        assert code == 2, argv


def test_check_config_prints_the_effective_settings_without_starting(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["proxy", "--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:0", "--sidecar-node", "3",
                 "--relay", "OFF", "--check-config"])
    out = capsys.readouterr().out
    assert code == 0
    assert 'upstreams: ["127.0.0.1:9092"]' in out and "sidecar_node: 3" in out and 'relay: "off"' in out
    code = main(["proxy", "--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:0", "--tls-cert", "/nonexistent.pem",
                 "--check-config"])
    assert code == 2 and "tls" in capsys.readouterr().err.lower()

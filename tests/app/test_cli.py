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

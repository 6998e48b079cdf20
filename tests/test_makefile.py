"""``make``'s install step on a machine that lacks what the build and the tests run. Here Java,
Maven, Node.js and npm are installed, so the recipe runs with a PATH that hides them, a ``dpkg``
that knows no package, and an ``apt-get`` that records what it was asked for (a stand-in: this
test must not install anything). On a machine that has everything it asks for nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="no make")


def _bare_path(tmp: Path, *, dpkg_knows_all: bool) -> tuple[Path, Path]:
    """A directory to be the whole PATH: a recording apt-get and a dpkg, and nothing else."""
    bin_dir, asked = tmp / "bin", tmp / "apt-get.log"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {asked}\n')
    (bin_dir / "dpkg").write_text(f"#!/bin/sh\nexit {0 if dpkg_knows_all else 1}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir, asked


def _make(target: str, path: str) -> subprocess.CompletedProcess[str]:
    assert MAKE is not None
    env = {**os.environ, "PATH": path}
    return subprocess.run([MAKE, "-s", "-C", str(ROOT), target], env=env, capture_output=True, text=True, timeout=60)


def test_java_maven_node_and_npm_are_installed_when_missing(tmp_path: Path) -> None:
    bin_dir, asked = _bare_path(tmp_path, dpkg_knows_all=True)
    r = _make("debs", str(bin_dir))
    assert r.returncode == 0, r.stderr
    lines = asked.read_text().splitlines()
    assert lines[0] == "update -qq"
    installed = lines[1].split()
    assert installed[:3] == ["install", "-y", "-qq"]
    # cargo is asked for too unless rustup's is in ~/.cargo/bin (the Makefile puts it on PATH)
    rustup = (Path.home() / ".cargo" / "bin" / "cargo").exists()
    assert sorted(installed[3:]) == sorted(["maven", "nodejs", "npm", "openjdk-17-jdk-headless",
                                            *([] if rustup else ["cargo"])])


def test_the_debian_tools_are_installed_when_dpkg_lacks_them(tmp_path: Path) -> None:
    bin_dir, asked = _bare_path(tmp_path, dpkg_knows_all=False)
    assert _make("debs", str(bin_dir)).returncode == 0
    installed = asked.read_text().splitlines()[1].split()[3:]
    assert {"kcat", "haproxy", "prometheus", "chromium", "tcpdump", "tshark"} <= set(installed)


@pytest.mark.skipif(not all(shutil.which(t) for t in ("javac", "mvn", "node", "npm", "cargo")),
                    reason="this machine lacks one of the tools itself")
def test_nothing_is_asked_for_where_the_tools_are_found(tmp_path: Path) -> None:
    bin_dir, asked = _bare_path(tmp_path, dpkg_knows_all=True)
    tools = {t: shutil.which(t) for t in ("javac", "mvn", "node", "npm", "cargo")}
    for name, where in tools.items():
        assert where is not None
        (bin_dir / name).symlink_to(where)
    assert _make("debs", str(bin_dir)).returncode == 0
    assert not asked.exists()

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


def test_java_maven_node_npm_and_gcc_are_installed_when_missing(tmp_path: Path) -> None:
    bin_dir, asked = _bare_path(tmp_path, dpkg_knows_all=True)
    r = _make("debs", str(bin_dir))
    assert r.returncode == 0, r.stderr
    lines = asked.read_text().splitlines()
    assert lines[0] == "update -qq"
    installed = lines[1].split()
    assert installed[:3] == ["install", "-y", "-qq"]
    # cargo is asked for too unless rustup's is in ~/.cargo/bin (the Makefile puts it on PATH)
    rustup = (Path.home() / ".cargo" / "bin" / "cargo").exists()
    assert sorted(installed[3:]) == sorted(["gcc", "maven", "nodejs", "npm", "default-jdk-headless",
                                            *([] if rustup else ["cargo"])])


def test_the_debian_tools_are_installed_when_dpkg_lacks_them(tmp_path: Path) -> None:
    bin_dir, asked = _bare_path(tmp_path, dpkg_knows_all=False)
    assert _make("debs", str(bin_dir)).returncode == 0
    installed = asked.read_text().splitlines()[1].split()[3:]
    assert {"kcat", "haproxy", "prometheus", "chromium", "tcpdump", "tshark"} <= set(installed)


@pytest.mark.skipif(not all(shutil.which(t) for t in ("javac", "mvn", "node", "npm", "gcc", "cargo")),
                    reason="this machine lacks one of the tools itself")
def test_nothing_is_asked_for_where_the_tools_are_found(tmp_path: Path) -> None:
    bin_dir, asked = _bare_path(tmp_path, dpkg_knows_all=True)
    tools = {t: shutil.which(t) for t in ("javac", "mvn", "node", "npm", "gcc", "cargo")}
    for name, where in tools.items():
        assert where is not None
        (bin_dir / name).symlink_to(where)
    assert _make("debs", str(bin_dir)).returncode == 0
    assert not asked.exists()


def _rust_machine(tmp: Path, cargo_version: str | None, cargo_web: bool, uid: int = 0,
                  clippy: bool = True) -> tuple[dict[str, str], Path]:
    """A machine whose packages are all in but Rust's: ``cargo --version`` says ``cargo_version``
    (None: no cargo), ``apt-cache`` knows ``cargo-web`` or not, ``id -u`` says ``uid``; no rustup
    (HOME is empty). The environment for ``make`` and the apt-get log."""
    bin_dir, asked = tmp / "bin", tmp / "apt-get.log"
    bin_dir.mkdir()
    dpkg = shutil.which("dpkg")
    assert dpkg is not None
    stubs = {
        "apt-get": f'#!/bin/sh\necho "$@" >> {asked}\n',
        "dpkg": f'#!/bin/sh\n[ "$1" = --compare-versions ] && exec {dpkg} "$@"\nexit 0\n',
        "apt-cache": f"#!/bin/sh\nexit {0 if cargo_web else 100}\n",
        "id": f"#!/bin/sh\necho {uid}\n",
    }
    if cargo_version is not None:
        no_clippy = '[ "$1" = clippy ] && exit 101\n' if not clippy else ""
        stubs["cargo"] = f'#!/bin/sh\n{no_clippy}echo "cargo {cargo_version} (deadbeef 2023-01-01)"\n'
    for tool in ("javac", "mvn", "node", "npm", "gcc"):
        stubs[tool] = "#!/bin/sh\nexit 0\n"
    for name, text in stubs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    home = tmp / "home"
    home.mkdir()
    return {**os.environ, "PATH": str(bin_dir), "HOME": str(home)}, asked


def _debs(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert MAKE is not None
    return subprocess.run([MAKE, "-s", "-C", str(ROOT), "debs"], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("cargo_version", "cargo_web", "wanted"), [
    ("1.65.0", True, ["rustc-web", "cargo-web", "rust-web-clippy"]),  # bookworm's cargo: too old, its cargo-web is not
    (None, True, ["rustc-web", "cargo-web", "rust-web-clippy"]),
    (None, False, ["cargo"]),  # a release whose own cargo is the one to have (apt-cache knows no clippy here)
    ("1.95.0", True, None),  # new enough: nothing asked for
])
def test_a_rust_new_enough_for_the_core_is_asked_for(tmp_path: Path, cargo_version: str | None, cargo_web: bool,
                                                    wanted: list[str] | None) -> None:
    env, asked = _rust_machine(tmp_path, cargo_version, cargo_web)
    r = _debs(env)
    assert r.returncode == 0, r.stdout + r.stderr
    if wanted is None:
        assert not asked.exists()
    else:
        assert asked.read_text().splitlines()[1].split()[3:] == wanted


def test_it_says_plainly_when_it_needs_root(tmp_path: Path) -> None:
    env, asked = _rust_machine(tmp_path, "1.65.0", True, uid=1000)
    r = _debs(env)
    assert r.returncode != 0 and not asked.exists()
    assert "needs root" in r.stdout and "rustc-web cargo-web" in r.stdout


def test_the_toolchains_clippy_is_asked_for_where_cargo_has_none(tmp_path: Path) -> None:
    """A new enough cargo without clippy (make lint's): the clippy of Debian's toolchain that
    is installed (this machine's dpkg knows every package, cargo-web's toolchain too)."""
    env, asked = _rust_machine(tmp_path, "1.95.0", True, clippy=False)
    r = _debs(env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert asked.read_text().splitlines()[1].split()[3:] == ["rust-web-clippy"]

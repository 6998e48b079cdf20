"""Installing the package: the native core is built only with a Rust new enough for it, and
otherwise the install builds the compiled road and says why (``native/toolchain.py``,
``setup.py``); ``pip wheel .`` builds in pip's isolated environment, from a clean clone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fetchlat.native import toolchain

ROOT = Path(__file__).resolve().parents[1]


def fake_cargo(bin_dir: Path, version: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "cargo").write_text(f'#!/bin/sh\necho "cargo {version} (0000000 2023-01-01)"\n')
    (bin_dir / "cargo").chmod(0o755)


def test_the_rust_the_core_needs_is_its_cargo_toml_s() -> None:
    assert toolchain.rust_version_needed() == "1.85"
    assert toolchain.version_tuple("1.96.0-nightly") == (1, 96, 0) > toolchain.version_tuple("1.85")


@pytest.mark.parametrize(("version", "why"), [
    (None, "no cargo (Rust) on PATH or in ~/.cargo/bin (on Debian 12: apt install rustc-web cargo-web)"),
    ("1.65.0", "is cargo 1.65.0, older than the 1.85 the core needs"),
    ("1.85.0", None),
    ("1.96.0", None),
])
def test_an_old_cargo_or_none_is_said_and_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   version: str | None, why: str | None) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if version is not None:
        fake_cargo(bin_dir, version)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("HOME", str(tmp_path))  # no rustup's cargo in ~/.cargo/bin
    said = toolchain.why_no_toolchain()
    assert (said is None) if why is None else (said is not None and why in said), said


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
@pytest.mark.skipif(bool(os.environ.get("FETCHLAT_PURE_PYTHON")), reason="built once, in the compiled run")
def test_pip_wheel_builds_in_isolation_with_an_old_cargo_first_on_path(tmp_path: Path) -> None:
    """A clean clone, pip's isolated build (its own mypy, setuptools-rust and prometheus-client
    from PyPI), Debian 12's cargo 1.65 first on PATH: the wheel holds the compiled hot path and
    no native core, and the build's log says why."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True, timeout=120)
    for f in subprocess.run(["git", "-C", str(ROOT), "ls-files", "-m", "-o", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split():
        if (ROOT / f).is_file():  # the checkout as it is, uncommitted edits included
            (clone / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, clone / f)
    fake_cargo(tmp_path / "old", "1.65.0")
    env = {**os.environ, "PATH": f"{tmp_path / 'old'}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path)}
    env.pop("FETCHLAT_PURE_PYTHON", None)
    env.pop("FETCHLAT_NATIVE", None)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path / "dist"),
                        str(clone)], env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "installing without the native core" in r.stderr + r.stdout
    assert "is cargo 1.65.0, older than the 1.85 the core needs" in r.stderr + r.stdout
    (wheel,) = (tmp_path / "dist").glob("fetchlat-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("fetchlat/protocol/hot__mypyc") for n in names), "the compiled hot path"
    assert not any(n.startswith("fetchlat/native/_core.") and n.endswith(".so") for n in names), \
        "no native core from a cargo too old"

"""What building the native core needs of the machine: a cargo at least as new as
``native/Cargo.toml``'s ``rust-version`` (Debian 12's own ``cargo`` package is 1.65; its
``cargo-web`` is new enough). ``setup.py`` asks ``why_no_toolchain()`` before it builds the core;
where it says why not, the install builds the compiled road without the core and says so, and
never fails for it. Imports nothing of fetchlat (``setup.py`` loads it before the package exists).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CARGO_TOML = Path(__file__).resolve().parent / "Cargo.toml"
DEBIAN_12 = "on Debian 12: apt install rustc-web cargo-web"


def rust_version_needed(cargo_toml: Path = CARGO_TOML) -> str:
    """The oldest Rust the core builds with (``rust-version`` in its ``[package]``)."""
    for line in cargo_toml.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "rust-version":
            return value.strip().strip('"')
    raise ValueError(f"{cargo_toml} declares no rust-version")


def version_tuple(text: str) -> tuple[int, ...]:
    """``1.85.0`` (or ``1.85``, ``1.96.0-nightly``) as numbers, for comparing."""
    out = []
    for part in text.split("-")[0].split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def find_cargo() -> str | None:
    """cargo on PATH, or where rustup puts it (a shell that never sourced ~/.cargo/env: then put
    on PATH for the build)."""
    found = shutil.which("cargo")
    if found is None:
        home = Path.home() / ".cargo" / "bin" / "cargo"
        if home.exists():
            os.environ["PATH"] = f"{home.parent}{os.pathsep}{os.environ.get('PATH', '')}"
            found = str(home)
    return found


def cargo_version(cargo: str) -> str | None:
    """What ``cargo --version`` says its version is (``cargo 1.85.0 (...)``), or None."""
    try:
        out = subprocess.run([cargo, "--version"], capture_output=True, text=True, timeout=120).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[1] if len(out) >= 2 and out[0] == "cargo" else None


def why_no_toolchain(cargo_toml: Path = CARGO_TOML) -> str | None:
    """Why the core cannot be built here (no cargo, or one too old), or None."""
    cargo = find_cargo()
    if cargo is None:
        return f"no cargo (Rust) on PATH or in ~/.cargo/bin ({DEBIAN_12})"
    need = rust_version_needed(cargo_toml)
    have = cargo_version(cargo)
    if have is None:
        return f"{cargo} --version says no version"
    if version_tuple(have) < version_tuple(need):
        return f"{cargo} is cargo {have}, older than the {need} the core needs (native/Cargo.toml; {DEBIAN_12})"
    return None

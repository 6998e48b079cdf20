"""fetchlat.native: the door to the native core, the broker side's per-read road in Rust
(``native/src/lib.rs``, built through PyO3 by ``pip install`` / ``make`` where cargo is present).

One room, one door: Python code reaches the core only through ``core()``, which returns the
loaded module or None, and ``reason()``, which says why. The Python road stays, always: the
core is not used when

- ``FETCHLAT_PURE_PYTHON=1`` is set (everything runs as Python), or ``FETCHLAT_NATIVE=0``;
- it was not built (no cargo at install time: the install says so);
- the checkout's ``native/src/`` (or a spec its layouts come from) is not the source it was
  built from (the module carries its own source: an edited checkout must not run yesterday's
  core; ``make`` rebuilds it).

What it does today (``docs/architecture.md``, "The native core"): ``Relay``, the road that
carries a sidecar's plaintext client connections after their first answer (the default,
``relay: auto``; ``proxy/relayed.py``), with the digest of the Fetch answers and Produce requests
it reads; ``Wire``, a connection's framing and correlation as records (held to the Python road by
its tests); ``StampedRecv.recv(fd)``, one ``recvmsg`` of a broker socket with the kernel's
receive stamp, for ``proxy/stamps.py``; the record batch walk, for ``protocol/stream.py``;
``Columns``, trace rows as columns of machine values, for ``metrics/rows.py``.
Imports nothing of fetchlat: it is the floor the others stand on.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Final

PURE_ENV: Final = "FETCHLAT_PURE_PYTHON"  # protocol/compiled.py's switch: everything as Python
NATIVE_ENV: Final = "FETCHLAT_NATIVE"  # 0: the compiled build without the native core
SOURCE_DIR: Final = Path(__file__).resolve().parent / "src"  # lib.rs and the modules it holds
SPECS_DIR: Final = Path(__file__).resolve().parent.parent / "protocol" / "specs"  # Kafka's JSON specs


def checkout_source(specs: tuple[str, ...] = ()) -> str | None:
    """The checkout's core as the module carries its own (``build.rs``): every ``src/**/*.rs``
    but the tests' (``src/tests/``), in the order of their paths under ``src/``, then the specs
    its layouts are generated from (``specs``, the module's ``LAYOUT_SPECS``) (None where the
    sources are not shipped)."""
    files = sorted((f.relative_to(SOURCE_DIR).as_posix(), f) for f in SOURCE_DIR.rglob("*.rs")
                   if f.relative_to(SOURCE_DIR).parts[0] != "tests")
    if not files:
        return None
    return "".join(f.read_text() for _, f in files) + "".join((SPECS_DIR / s).read_text() for s in specs)


def off_by_env() -> str | None:
    """Why the environment keeps the core off (``setup.py`` asks too, before building it), or None."""
    pure = os.environ.get(PURE_ENV, "")
    if pure not in ("", "0"):
        return f"{PURE_ENV}={pure}"
    if os.environ.get(NATIVE_ENV, "") == "0":
        return f"{NATIVE_ENV}=0"
    return None


@functools.cache
def _load() -> tuple[ModuleType | None, str]:
    off = off_by_env()
    if off is not None:
        return None, off
    try:
        mod = importlib.import_module("fetchlat.native._core")
    except ImportError as exc:
        return None, f"not built ({exc}): pip install / make builds it where cargo is present"
    source = checkout_source(tuple(mod.LAYOUT_SPECS))
    if source is not None and source != mod.SOURCE:
        return None, "stale native build: native/src/ or its specs changed since it was built (make rebuilds it)"
    return mod, "native core loaded (native/src/)"


def core() -> ModuleType | None:
    """The native core, or None (the Python road runs; ``reason()`` says why)."""
    return _load()[0]


def reason() -> str:
    return _load()[1]

"""Which build of the hot path is loaded: the one list of modules compiled with mypyc, the
pure-Python switch, and the guard against a stale compiled build.

``pip install`` compiles ``HOT`` (``setup.py`` loads this file on its own: it imports only the
standard library) when a C compiler
and the Python headers are present, next to the same ``.py`` sources, which stay the fallback.
Python's import system prefers an extension to a source file in the same directory, so this
module puts a finder first on ``sys.meta_path`` that loads the ``.py`` instead when:

- ``FETCHLAT_PURE_PYTHON=1`` is set (the escape hatch, and how the tests run both builds), or
- a source file changed since the build (``hot_sources.json``, written by the build, holds each
  source's SHA-256): an edited checkout must not run yesterday's compiled code.

Compiled modules call one another's classes natively, so it is all or nothing: one stale file
sends every hot module to its source. ``status()`` says which build runs and why; the proxy logs
it at start and exports it as ``fetchlat_build_info{hot_path}`` (a silent fallback to slow code
is a known trap of compiled Python libraries). This module itself is never compiled.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

# The hot path, in import order of the packages.
HOT: Final = (
    "fetchlat.protocol.errors",
    "fetchlat.protocol.apis",
    "fetchlat.protocol.primitives",
    "fetchlat.protocol.framing",
    "fetchlat.protocol.headers",
    "fetchlat.protocol.stream",
    "fetchlat.protocol.stream_now",
    "fetchlat.protocol.fetch",
    "fetchlat.protocol.fetch_now",
    "fetchlat.protocol.produce",
    "fetchlat.protocol.produce_now",
    "fetchlat.protocol.share",
    "fetchlat.protocol.share_now",
    "fetchlat.protocol.digested",
    "fetchlat.protocol.events",
    "fetchlat.protocol.inflight",
    "fetchlat.protocol.sessions",
    "fetchlat.protocol.walker",
    "fetchlat.protocol.rewrite",
    "fetchlat.protocol.requests",
    "fetchlat.protocol.held",
    "fetchlat.protocol.responses",
    "fetchlat.protocol.connection",
    "fetchlat.protocol.routed",
    "fetchlat.metrics.vocabulary",
    "fetchlat.metrics.broker_timing",
    "fetchlat.metrics.cluster",
    "fetchlat.metrics.partitions",
    "fetchlat.metrics.model",
    "fetchlat.metrics.awaiting",
    "fetchlat.metrics.fast",
    "fetchlat.metrics.prom",
    "fetchlat.metrics.rows",
    "fetchlat.metrics.observer",
    "fetchlat.proxy.policy",
    "fetchlat.proxy.registry",
    "fetchlat.proxy.conversation",
    "fetchlat.proxy.carried",
    "fetchlat.proxy.stamps",
    "fetchlat.proxy.relayed",
    "fetchlat.proxy.session",
)
MANIFEST: Final = "hot_sources.json"
PURE_ENV: Final = "FETCHLAT_PURE_PYTHON"
ROOT: Final = Path(__file__).resolve().parent.parent  # holds protocol/, metrics/, proxy/ (or fetchlat/*)


def source_path(module: str) -> Path:
    """``fetchlat.protocol.requests`` -> ``<root>/protocol/requests.py`` (the checkout's layout
    and an installed ``fetchlat/`` have the same shape below the root)."""
    _, package, name = module.split(".")
    return ROOT / package / f"{name}.py"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pure_requested() -> str | None:
    """``FETCHLAT_PURE_PYTHON=...`` when it asks for the pure build (at install or at run time)."""
    value = os.environ.get(PURE_ENV, "")
    return None if value in ("", "0") else f"{PURE_ENV}={value}"


def _why_source() -> str | None:
    """Why the hot modules must load from source, or None if the compiled build may load."""
    pure = pure_requested()
    if pure is not None:
        return pure
    manifest = ROOT / "protocol" / MANIFEST
    if not manifest.exists():
        return None  # nothing was compiled: the sources load anyway
    built: dict[str, str] = json.loads(manifest.read_text())
    for module in HOT:
        path = source_path(module)
        if path.exists() and built.get(module) != digest(path):
            return f"stale compiled build: {path.relative_to(ROOT)} changed since it was built (reinstall)"
    return None


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads the hot modules from their ``.py`` files, ahead of the extensions beside them."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in HOT:
            return None
        src = source_path(fullname)
        return importlib.util.spec_from_file_location(fullname, src) if src.exists() else None


_REASON: str | None = None
_INSTALLED = False


def install() -> None:
    """Called by each hot package's ``__init__`` before any of its modules loads."""
    global _REASON, _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    _REASON = _why_source()
    if _REASON is not None:
        sys.meta_path.insert(0, _SourceFirst())


def loaded_from_source() -> list[str]:
    """The hot modules imported so far whose code is Python source, not an extension."""
    return [name for name in HOT if name in sys.modules
            and str(getattr(sys.modules[name], "__file__", "")).endswith(".py")]


@functools.cache
def status() -> tuple[str, str]:
    """(``compiled`` | ``python``, why): imports every hot module and looks where each came from
    (once: which build loaded does not change in a process)."""
    for name in HOT:
        importlib.import_module(name)
    from_source = loaded_from_source()
    if not from_source:
        return "compiled", "every hot module is a compiled extension"
    if _REASON is not None:
        return "python", _REASON
    if len(from_source) == len(HOT):
        return "python", "no compiled build is installed (no C compiler or Python headers at install time)"
    return "python", f"partly compiled: {', '.join(from_source)} loaded from source"

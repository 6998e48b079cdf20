"""Which build this process runs, for the start log and ``fetchlat_build_info``: the package
version, and the hot path's build (``compiled`` | ``python``) with the reason, detected from
where the hot modules were actually loaded (``protocol/compiled.py`` owns the list and the
switch)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ..protocol import compiled


def hot_path() -> str:
    return str(compiled.status()[0])


def hot_path_reason() -> str:
    return str(compiled.status()[1])


def fetchlat_version() -> str:
    try:
        return version("fetchlat")
    except PackageNotFoundError:
        return "unknown"

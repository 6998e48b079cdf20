"""Which build this process runs, for the start log and ``fetchlat_build_info``: the package
version, and the hot path's build with the reason, detected from what actually loaded:

- ``native``: the hot modules are compiled and the native core (``native/``) reads the broker
  sockets;
- ``compiled``: the hot modules are compiled (``protocol/compiled.py`` owns the list and the
  switch), the native core is not loaded (``native.reason()`` says why);
- ``python``: the hot modules run from source.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .. import native
from ..protocol import compiled
from . import stamps

HOT_PATHS = ("native", "compiled", "python")  # what hot_path() may say (fetchlat_build_info{hot_path})


def hot_path() -> str:
    built = str(compiled.status()[0])
    return "native" if built == "compiled" and stamps.road() == "native" else built


def hot_path_reason() -> str:
    return f"{compiled.status()[1]}; native core: {native.reason()}"


def fetchlat_version() -> str:
    try:
        return version("fetchlat")
    except PackageNotFoundError:
        return "unknown"

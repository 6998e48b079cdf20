"""Which build of the hot path this process runs: ``compiled`` when the codec's hot modules
were loaded from compiled extensions, ``python`` when from their ``.py`` source. Said at start
and exported as ``fetchlat_build_info{hot_path}``: a silent fallback to slow code is a known
trap of compiled Python libraries. (Today's build is pure Python; the compiled one is the
next step, issue #18.)"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Final

from fetchlat.protocol import requests, responses, stream

HOT_MODULES: Final = (stream, requests, responses)


def hot_path() -> str:
    return "compiled" if all(not str(m.__file__).endswith(".py") for m in HOT_MODULES) else "python"


def fetchlat_version() -> str:
    try:
        return version("fetchlat")
    except PackageNotFoundError:
        return "unknown"

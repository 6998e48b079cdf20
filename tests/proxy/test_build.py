"""Which build of the hot path runs is detected, not assumed: a module loaded from an
extension (not a .py file) counts as compiled, and all hot modules must be."""

from __future__ import annotations

import types

import pytest
from fetchlat.proxy import build


def test_the_source_build_says_python() -> None:
    assert build.hot_path() == "python"


def test_compiled_only_when_every_hot_module_is(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = [types.SimpleNamespace(__file__=f"/x/{m.__name__.rpartition('.')[2]}.cpython-311-x86_64-linux-gnu.so")
             for m in build.HOT_MODULES]
    monkeypatch.setattr(build, "HOT_MODULES", tuple(fakes))
    assert build.hot_path() == "compiled"
    fakes[-1].__file__ = "/x/responses.py"  # one module fell back to source
    assert build.hot_path() == "python"

"""Which build of the hot path runs is detected, not assumed, and a checkout never runs a
compiled build older than its sources: ``FETCHLAT_PURE_PYTHON=1`` and a changed source both
send every hot module to its ``.py``, with the reason said."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
from fetchlat.protocol import compiled
from fetchlat.proxy import build

ROOT = Path(__file__).resolve().parents[2]


def setup_module_() -> object:
    spec = importlib.util.spec_from_file_location("fetchlat_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # setup() itself runs only as __main__
    return mod


def test_this_process_runs_the_build_this_machine_can_make() -> None:
    """On a machine with a C compiler and the Python headers, `make` installs the compiled
    build; anything else is a silent fallback, and fails here with the reason."""
    setup = setup_module_()
    why_not = setup.why_not_compiled()  # type: ignore[attr-defined]
    expected = "compiled" if why_not is None else "python"
    if expected == "compiled" and setup.why_not_native() is None:  # type: ignore[attr-defined]
        expected = "native"
    assert build.hot_path() == expected, build.hot_path_reason()
    if expected == "python" and os.environ.get(compiled.PURE_ENV):
        assert compiled.PURE_ENV in build.hot_path_reason()


def test_setup_compiles_exactly_the_hot_list() -> None:
    assert setup_module_().compiled.HOT == compiled.HOT  # type: ignore[attr-defined]
    for name in compiled.HOT:
        assert compiled.source_path(name).exists(), name


def fake_checkout(tmp_path: Path, changed: str | None = None) -> Path:
    for name in compiled.HOT:
        p = tmp_path / compiled.source_path(name).relative_to(compiled.ROOT)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {name}\n")
    (tmp_path / "protocol" / compiled.MANIFEST).write_text(json.dumps(
        {n: hashlib.sha256(f"# {n}\n".encode()).hexdigest() for n in compiled.HOT}))
    if changed is not None:
        (tmp_path / compiled.source_path(changed).relative_to(compiled.ROOT)).write_text("# edited\n")
    return tmp_path


@pytest.mark.parametrize(("env", "changed", "why"), [
    ("", None, None),
    ("1", None, "FETCHLAT_PURE_PYTHON=1"),
    ("0", None, None),
    ("", "fetchlat.metrics.observer", "stale compiled build: metrics/observer.py changed"),
])
def test_why_the_hot_path_loads_from_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: str,
                                            changed: str | None, why: str | None) -> None:
    monkeypatch.setattr(compiled, "ROOT", fake_checkout(tmp_path, changed))
    monkeypatch.setenv(compiled.PURE_ENV, env)
    reason = compiled._why_source()
    assert (reason is None) if why is None else (reason is not None and reason.startswith(why))


def test_no_manifest_means_nothing_was_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled, "ROOT", tmp_path)
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    assert compiled._why_source() is None

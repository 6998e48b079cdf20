"""The direct twins are checked-in source generated from the streaming parsers: regenerating
them changes nothing, and no module of the codec builds code at import time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fetchlat.protocol import compiled, gen_direct

PROTOCOL = Path(gen_direct.__file__).parent


@pytest.mark.parametrize("target", sorted(gen_direct.SOURCES))
def test_regenerating_the_direct_twins_changes_nothing(target: str) -> None:
    assert (PROTOCOL / target).read_text() == gen_direct.generate(target), (
        f"{target} is stale: run python -m fetchlat.protocol.gen_direct")


def test_the_check_mode_reports_a_stale_twin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for target in gen_direct.SOURCES:
        (tmp_path / target).write_text(gen_direct.generate(target))
    monkeypatch.setattr(gen_direct, "OUT", tmp_path)
    assert gen_direct.main(["--check"]) == 0
    (tmp_path / "fetch_now.py").write_text("# edited by hand\n")
    assert gen_direct.main(["--check"]) == 1


def test_a_bare_yield_cannot_be_twinned() -> None:
    bad = "def bad(r: Reader) -> Parser[int]:\n    chunk = yield\n    return len(chunk)\n"
    with pytest.raises(SystemExit, match="bare yield"):
        gen_direct.twin(bad, "bad")


def test_no_codec_module_execs_or_compiles_code() -> None:
    for path in sorted(PROTOCOL.glob("*.py")):
        tree = ast.parse(path.read_text())
        called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert not called & {"exec", "eval", "compile"}, path.name


def test_no_compiled_module_binds_two_kinds_of_exception_to_one_name() -> None:
    """mypyc types an ``except ... as name`` by its first handler: a second handler of another
    type under the same name raises TypeError in the compiled build where the source runs (a
    struct.error from a short field, found by ``make fuzz``: tests/data/fuzz-regressions/)."""
    for module in compiled.HOT:
        path = compiled.source_path(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Try):
                names = [h.name for h in node.handlers if h.name]
                assert len(names) == len(set(names)), f"{path.name}:{node.lineno} binds {names}"

"""Dependencies point one way (STYLE.md §1): protocol/ and metrics/ never touch sockets,
asyncio, clocks or (protocol/) prometheus; protocol never imports metrics or proxy."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
IO_MODULES = {"asyncio", "socket", "uvloop", "time", "selectors", "threading"}
RULES = {
    "protocol": IO_MODULES | {"prometheus_client", "fetchlat.metrics", "fetchlat.proxy"},
    "metrics": IO_MODULES | {"fetchlat.proxy"},
}


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_imports_stay_in_their_layer(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    for f in files:
        for name in imports(f):
            banned = {b for b in RULES[package] if name == b or name.startswith(b + ".")}
            assert not banned, f"{f.relative_to(ROOT)} imports {name}"

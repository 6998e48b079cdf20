"""The layers and which way they depend (STYLE.md §1, docs/architecture.md), walked with ast:
protocol/ and metrics/ never touch sockets, asyncio or clocks; the proxy core (conversation,
policy, registry) is as pure; the proxy's I/O modules import no latency model; analysis/
shares only the trace schema, layout and vocabulary; and no module imports, even indirectly, itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("protocol", "metrics", "proxy", "analysis", "perf", "capture")
IO_MODULES = {"asyncio", "socket", "uvloop", "time", "selectors", "threading", "ssl"}
RULES = {
    "protocol": IO_MODULES | {"prometheus_client", "fetchlat.metrics", "fetchlat.proxy"},
    "metrics": IO_MODULES | {"fetchlat.proxy"},
    "proxy/conversation.py": IO_MODULES | {"fetchlat.proxy.session", "fetchlat.proxy.server"},
    "proxy/policy.py": IO_MODULES,
    "proxy/registry.py": IO_MODULES,
    # the I/O layer hands events to the observation layer; it never computes latency itself
    "proxy/session.py": {"fetchlat.metrics.model", "fetchlat.metrics.observer", "fetchlat.protocol.connection"},
    "proxy/server.py": {"fetchlat.metrics.model"},
    "proxy/listeners.py": {"fetchlat.metrics", "fetchlat.protocol"},
    "proxy/discovery.py": {"fetchlat.metrics"},
    "perf": {"fetchlat.proxy", "fetchlat.protocol", "fetchlat.metrics", "fetchlat.analysis"},
    # a capture is bytes and timestamps: headers, reassembly and flows are as pure as the core
    "capture/packets.py": IO_MODULES,
    "capture/reassembly.py": IO_MODULES,
    "capture/flows.py": IO_MODULES | {"fetchlat.proxy.session", "fetchlat.proxy.server", "fetchlat.metrics.model"},
}
# analysis/ may import these of fetchlat, and nothing else
ANALYSIS_ALLOWED = {"fetchlat.analysis", "fetchlat.metrics.trace_schema", "fetchlat.metrics.trace_layout",
                    "fetchlat.metrics.vocabulary"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = ["fetchlat", *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved, at any depth of the file."""
    pkg = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                mod = f"{base}.{node.module}" if node.module else base
                out.add(mod)
                if not node.module:  # from . import x
                    out |= {f"{base}.{a.name}" for a in node.names}
            elif node.module:
                out.add(node.module)
                out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def sources(where: str) -> list[Path]:
    p = ROOT / where
    return [p] if p.suffix == ".py" else sorted(p.rglob("*.py"))


@pytest.mark.parametrize("where", sorted(RULES))
def test_modules_import_only_what_their_layer_may(where: str) -> None:
    files = sources(where)
    assert files
    for f in files:
        for name in imports(f):
            banned = {b for b in RULES[where] if name == b or name.startswith(b + ".")}
            assert not banned, f"{f.relative_to(ROOT)} imports {name}"


def test_analysis_shares_only_the_trace_schema_layout_and_vocabulary() -> None:
    for f in sources("analysis"):
        ours = {n for n in imports(f) if n.startswith("fetchlat.")}
        stray = {n for n in ours if not any(n == a or n.startswith(a + ".") for a in ANALYSIS_ALLOWED)}
        assert not stray, f"{f.relative_to(ROOT)} imports {sorted(stray)}"


def graph() -> dict[str, set[str]]:
    mods = {module_name(f): f for pkg in PACKAGES for f in sources(pkg)}
    return {m: {n for n in imports(f) if n in mods and n != m} for m, f in mods.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``g`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                return [*path[path.index(n):], n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle_anywhere() -> None:
    g = graph()
    assert len(g) > 40
    cycle = find_cycle(g)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle_where_there_is_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    # the cycle the proxy had: session <-> server (the server's import under TYPE_CHECKING)
    assert find_cycle({"fetchlat.proxy.session": {"fetchlat.proxy.server"},
                       "fetchlat.proxy.server": {"fetchlat.proxy.session"}}) is not None

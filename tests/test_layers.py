"""The layers and which way they depend (docs/architecture.md), walked with ast: protocol/ and
metrics/ never touch sockets, asyncio or clocks; the proxy core (conversation, policy, registry)
is as pure; the proxy's I/O modules import no latency model; analysis/ and verify/ share only
the trace schema, layout and vocabulary; the packages stand on floors (no package imports one
that imports it back, and nothing imports the app shell); and no module imports, even
indirectly, itself."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("protocol", "metrics", "proxy", "capture", "analysis", "verify", "perf", "embedded", "app", "native")
IO_MODULES = {"asyncio", "socket", "uvloop", "time", "selectors", "threading", "ssl"}
RULES = {
    "protocol": IO_MODULES | {"prometheus_client", "fetchlat.metrics", "fetchlat.proxy"},
    "metrics": IO_MODULES | {"fetchlat.proxy"},
    "proxy/conversation.py": IO_MODULES | {"fetchlat.proxy.session", "fetchlat.proxy.server"},
    "proxy/carried.py": IO_MODULES | {"fetchlat.proxy.session", "fetchlat.proxy.server"},
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
# analysis/ and verify/ may import these of fetchlat (and their own package), and nothing else
# (broker_timing: the model's park and answer constants, which verify --parts judges)
TRACE_READERS_ALLOWED = {"fetchlat.metrics.trace_schema", "fetchlat.metrics.trace_layout",
                         "fetchlat.metrics.vocabulary", "fetchlat.metrics.broker_timing"}
# Each package's floor (docs/architecture.md): a package imports only packages on lower floors.
FLOORS = {"native": 0, "protocol": 1, "perf": 1, "embedded": 1, "metrics": 2, "proxy": 3, "analysis": 3, "verify": 3,
          "capture": 4, "app": 5}


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


@pytest.mark.parametrize("pkg", ["analysis", "verify"])
def test_trace_readers_share_only_the_trace_schema_layout_and_vocabulary(pkg: str) -> None:
    for f in sources(pkg):
        ours = {n for n in imports(f) if n.startswith("fetchlat.")}
        allowed = TRACE_READERS_ALLOWED | {f"fetchlat.{pkg}"}
        # ``from ..metrics import trace_layout`` names the package too: its face, not its modules
        stray = {n for n in ours - {"fetchlat.metrics"} if not any(n == a or n.startswith(a + ".") for a in allowed)}
        assert not stray, f"{f.relative_to(ROOT)} imports {sorted(stray)}"


def package_graph() -> dict[str, set[str]]:
    """Package -> the packages its modules import (itself left out)."""
    out: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for m, deps in graph().items():
        pkg = m.split(".")[1]
        out[pkg] |= {d.split(".")[1] for d in deps} - {pkg}
    return out


def test_every_package_has_a_floor_and_imports_only_lower_floors() -> None:
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert set(FLOORS) == set(PACKAGES) == set(mapped.values())
    for pkg, deps in package_graph().items():
        up = {d for d in deps if FLOORS[d] >= FLOORS[pkg]}
        assert not up, f"{pkg}/ (floor {FLOORS[pkg]}) imports {sorted(up)} (floors {sorted(FLOORS[d] for d in up)})"


def test_no_package_imports_a_package_that_imports_it_back() -> None:
    g = package_graph()
    assert g["app"] >= {"proxy", "capture", "analysis", "perf"}  # the graph is read, not empty
    cycle = find_cycle(g)
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_the_package_check_sees_the_cycle_the_cli_made() -> None:
    """proxy/cli.py once dispatched ``fetchlat pcap`` while capture/ imported proxy's core."""
    g = {"proxy": {"metrics", "capture"}, "capture": {"proxy", "metrics"}, "metrics": set()}
    assert find_cycle(g) == ["capture", "proxy", "capture"]


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

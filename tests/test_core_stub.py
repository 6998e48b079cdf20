"""The native core's typed stub (``native/_core.pyi``) against the module built from
``native/src/``: every public name of one is in the other, every class has the same methods and
properties, every function and constructor the same parameters. A name added to the core and not
to the stub (or the other way) fails here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from fetchlat import native

STUB = Path(__file__).resolve().parents[1] / "native" / "_core.pyi"
CORE = native.core()
pytestmark = pytest.mark.skipif(CORE is None, reason=f"native core not loaded: {native.reason()}")


def _stub() -> tuple[set[str], dict[str, dict[str, list[str]]], dict[str, list[str]]]:
    """(constants, classes: {name: {member: params}}, functions: {name: params}) of the stub."""
    tree = ast.parse(STUB.read_text())
    consts: set[str] = set()
    classes: dict[str, dict[str, list[str]]] = {}
    funcs: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            consts.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            funcs[node.name] = [a.arg for a in node.args.args]
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = {m.name: [a.arg for a in m.args.args][1:]
                                  for m in node.body if isinstance(m, ast.FunctionDef)}
    return consts, classes, funcs


def _params(obj: object) -> list[str]:
    return list(inspect.signature(obj).parameters)  # type: ignore[arg-type]


def test_the_stub_names_what_the_module_has() -> None:
    consts, classes, funcs = _stub()
    public = {n for n in dir(CORE) if not n.startswith("_")}
    assert public == consts | set(classes) | set(funcs)
    for name in consts:
        assert not callable(getattr(CORE, name)), name
    for name, params in funcs.items():
        assert _params(getattr(CORE, name)) == params, name


def test_each_class_has_the_stubs_methods_and_properties() -> None:
    _, classes, _ = _stub()
    for name, members in classes.items():
        cls = getattr(CORE, name)
        got = {m for m in dir(cls) if not m.startswith("_")}
        assert got == set(members) - {"__init__"}, name
        assert _params(cls) == members["__init__"], f"{name}()"
        for m, params in members.items():
            attr = inspect.getattr_static(cls, m, None)
            if m == "__init__" or not callable(attr):
                continue  # a property: its name is enough
            assert _params(getattr(cls, m))[1:] == params, f"{name}.{m}"  # past its self

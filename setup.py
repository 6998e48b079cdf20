"""The compiled hot path and the native core: pyproject.toml says everything else.

``pip install`` compiles the modules listed in ``protocol/compiled.py`` (``HOT``) with mypyc
when a C compiler and the Python headers are present; without them, or with
``FETCHLAT_PURE_PYTHON=1``, it installs the pure-Python package (the same sources). The build
writes ``hot_sources.json`` (each source's SHA-256) beside the extensions, so that an edited
checkout falls back to its source instead of running stale compiled code.

The native core (``native/src/lib.rs``, Rust through PyO3, ``docs/architecture.md``) is built
by setuptools-rust when cargo is present (on PATH or in ``~/.cargo/bin``) and the build is not
pure; without cargo, the install says so and the Python road runs (``native/__init__.py``).

mypyc names a module after its path, and this checkout maps ``fetchlat.protocol`` to
``protocol/`` (pyproject's ``package-dir``), so the sources are staged under
``build/mypyc/src/fetchlat/`` and compiled from there. mypyc writes a C file a module
(``multi_file``) and they are compiled side by side, a gcc a core: the compiled build took 178 s
of a fresh build on 2 cores as one file (one gcc), 89 s side by side, with the same
instructions per round trip (``python bench/instr_round_trips.py --paths fetchlat-relay,fetchlat
--other <checkout>``, 2026-12-02: within 0.5 % either way for every request type).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
PACKAGES = ("protocol", "metrics", "proxy", "native")  # staged for the type check; HOT is what compiles
GROUP = "fetchlat.protocol.hot"  # the shared library: fetchlat/protocol/hot__mypyc.*.so


def _load(name: str, path: Path):  # type: ignore[no-untyped-def]
    """A module of the checkout on its own (the package is not installed yet while it builds);
    both imports only the standard library."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# the list of hot modules, where their sources are, the pure switch and the manifest's digest
compiled = _load("fetchlat_build_compiled", HERE / "protocol" / "compiled.py")
# the native core's door: the switches that keep it off; and what its build needs of the machine
native = _load("fetchlat_build_native", HERE / "native" / "__init__.py")
toolchain = _load("fetchlat_build_toolchain", HERE / "native" / "toolchain.py")


def why_not_compiled() -> str | None:
    pure = compiled.pure_requested()
    if pure is not None:
        return pure
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (Python.h)"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed in the build environment"
    return None


def extensions() -> list:
    why = why_not_compiled()
    if why is not None:
        print(f"fetchlat: installing the pure-Python hot path: {why}", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    stage = HERE / "build" / "mypyc" / "src"
    target = HERE / "build" / "mypyc" / "c"  # mypyc's C, the group's header in its package's folder
    shutil.rmtree(stage, ignore_errors=True)
    for package in PACKAGES:
        dest = stage / "fetchlat" / package
        dest.mkdir(parents=True)
        for f in (HERE / package).glob("*.py"):
            shutil.copy2(f, dest / f.name)
    (stage / "fetchlat" / "__init__.py").write_text("")  # for mypy's module names only; not installed
    paths = [str(Path("fetchlat") / compiled.source_path(m).relative_to(compiled.ROOT)) for m in compiled.HOT]
    cwd = os.getcwd()
    os.chdir(stage)
    try:
        # the stage is the base of every module name: mypy would otherwise climb into the checkout,
        # whose root __init__.py (docs/architecture.md) sits in a folder of any name
        exts = mypycify([*paths, "--ignore-missing-imports", "--explicit-package-bases"], opt_level="3",
                        multi_file=True, group_name=GROUP, target_dir=str(target))
    finally:
        os.chdir(cwd)
    for e in exts:  # a module's C file (written beside the group's) includes the group's header
        e.include_dirs.append(str(target.joinpath(*GROUP.split(".")[:-1])))
    return exts


def why_not_native() -> str | None:
    off = native.off_by_env()
    if off is not None:
        return off
    why = toolchain.why_no_toolchain()
    if why is not None:
        return why
    try:
        import setuptools_rust  # noqa: F401
    except ImportError:
        return "setuptools-rust is not installed in the build environment"
    return None


def rust_extensions() -> list:
    why = why_not_native()
    if why is not None:
        print(f"fetchlat: installing without the native core: {why}", file=sys.stderr)
        return []
    from setuptools_rust import Binding, RustExtension

    # optional: a build that fails anyway (a linker, a registry out of reach) leaves the compiled
    # road, said in the build's log, not a failed install
    return [RustExtension("fetchlat.native._core", path="native/Cargo.toml", binding=Binding.PyO3,
                          debug=False, optional=True)]


class BuildExt(build_ext):
    """Writes the manifest of compiled sources beside the shared library."""

    def _manifest(self) -> Path | None:
        libs = [e for e in self.extensions if e.name == GROUP + "__mypyc"]
        return Path(self.get_ext_fullpath(libs[0].name)).parent / compiled.MANIFEST if libs else None

    def build_extension(self, ext: Any) -> None:
        """The sources of one extension compiled side by side, a job a core (mypyc writes the hot
        path as a C file a module)."""
        jobs = os.cpu_count() or 1
        cc = self.compiler
        if jobs < 2 or len(ext.sources) < 2 or not hasattr(cc, "_setup_compile"):
            super().build_extension(ext)
            return
        serial = cc.compile

        def compile_side_by_side(sources: list[str], output_dir: str | None = None, macros: Any = None,
                                 include_dirs: Any = None, debug: int = 0, extra_preargs: Any = None,
                                 extra_postargs: Any = None, depends: Any = None) -> list[str]:
            macros, objects, extra, pp_opts, build = cc._setup_compile(output_dir, macros, include_dirs, sources,
                                                                      depends, extra_postargs)
            cc_args = cc._get_cc_args(pp_opts, debug, extra_preargs)
            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(lambda obj: cc._compile(obj, *build[obj], cc_args, extra, pp_opts), objects))
            return objects

        cc.compile = compile_side_by_side
        try:
            super().build_extension(ext)
        finally:
            cc.compile = serial

    def run(self) -> None:
        super().run()
        out = self._manifest()
        if out is None:
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({m: compiled.digest(compiled.source_path(m)) for m in compiled.HOT},
                                  indent=1, sort_keys=True) + "\n")

    def get_outputs(self) -> list[str]:
        out = self._manifest()
        return super().get_outputs() + ([str(out)] if out is not None else [])


if __name__ == "__main__":
    setup(ext_modules=extensions(), rust_extensions=rust_extensions(), cmdclass={"build_ext": BuildExt})

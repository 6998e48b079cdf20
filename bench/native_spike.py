"""The native core's language, chosen by a measured spike: Rust through PyO3 (``native/``) or
Cython. The same function in both, rule for rule: the record batch walk (``walk_batches``, in
``native/src/lib.rs`` and ``bench/spike/walk_cy.pyx``), built here with the venv's Cython and
the machine's C compiler, checked to agree on the same buffers, then timed in one process:

- **a call**: one 61-byte batch walked, the tuple back (what the per-read road pays per call:
  the argument's buffer taken, the tuple of ten values made);
- **a walk**: 1 MiB of one-record batches of 80 and 1 100 bytes, per batch;
- for scale, the walk the build runs without a core (``protocol/stream.py``'s ``walk``, compiled
  by mypyc where ``make`` built it), the same call through its generator.

    make bench-spike        # python bench/native_spike.py [--trials 7]

Needs Cython (``pip install cython``; ``make bench-spike`` installs it) and the native core
built (``make``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batch_walk import HEADER

PYX = Path(__file__).resolve().parent / "spike" / "walk_cy.pyx"


def build_cython() -> tuple[ModuleType, float, int]:
    """``walk_cy.pyx`` compiled (-O3) into a temporary directory and imported; the build's
    seconds and the extension's size."""
    import importlib.util

    from Cython.Build import cythonize  # type: ignore[import-not-found]

    out = Path(tempfile.mkdtemp(prefix="fetchlat-spike-"))
    shutil.copy(PYX, out / PYX.name)
    t0 = time.monotonic()
    cythonize([str(out / PYX.name)], quiet=True, compiler_directives={"language_level": 3})
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    so = out / f"walk_cy{suffix}"
    inc = sysconfig.get_paths()["include"]
    subprocess.run(["gcc", "-O3", "-shared", "-fPIC", f"-I{inc}", str(out / "walk_cy.c"), "-o", str(so)],
                   check=True)
    seconds = time.monotonic() - t0
    spec = importlib.util.spec_from_file_location("walk_cy", so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, seconds, so.stat().st_size


def blob(batches: int, size: int, *, control_every: int = 0, log_append: bool = False) -> bytes:
    """``batches`` v2 batches of ``size`` bytes (one record each; every ``control_every``-th a
    control batch), base offsets counting up."""
    out = []
    for i in range(batches):
        attrs = (0x20 if control_every and i % control_every == control_every - 1 else 0) | (0x08 if log_append else 0)
        out.append(HEADER.pack(i, size - 12, 0, 2, 0, attrs, 0, 1000 + i, 2000 + i, -1, -1, -1, 1) + bytes(size - 61))
    return b"".join(out)


def cases() -> list[tuple[str, bytes, int, int]]:
    """Buffers both walks must read alike: whole, cut short, a lying length, another magic,
    control batches, a start inside the buffer, nothing."""
    whole = blob(50, 80, control_every=7, log_append=True)
    lying = bytearray(blob(3, 80))
    lying[80 + 8 : 80 + 12] = (10).to_bytes(4, "big")  # the second batch's length shorter than a header
    legacy = bytearray(blob(3, 80))
    legacy[160 + 16] = 1
    return [("whole", whole, 0, len(whole)), ("cut", whole, 0, len(whole) - 30), ("tail", whole, 0, 80 * 2 + 20),
            ("lying", bytes(lying), 0, len(lying)), ("legacy", bytes(legacy), 0, len(legacy)),
            ("offset", whole, 80 * 3, 80 * 10), ("empty", whole, 0, 0), ("one", blob(1, 61), 0, 61)]


def best_ns(fn: object, loops: int, trials: int) -> float:
    best = float("inf")
    for _ in range(trials):
        t = time.perf_counter_ns()
        for _ in range(loops):
            fn()  # type: ignore[operator]
        best = min(best, (time.perf_counter_ns() - t) / loops)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=7)
    args = ap.parse_args()
    from fetchlat import native
    from fetchlat.protocol.stream import Reader, walk

    core = native.core()
    if core is None:
        print(f"the native core is not loaded: {native.reason()}", file=sys.stderr)
        return 2
    cy, cy_build_s, cy_bytes = build_cython()
    rust, cy_walk = core.walk_batches, cy.walk_batches

    def py_walk(buf: bytes, start: int, n: int) -> object:
        r = Reader(buf)
        r.pos = start
        g = walk(r, n)
        try:
            next(g)
        except StopIteration as stop:
            return stop.value
        raise AssertionError("the Python walk asked for more bytes than it was given")

    for name, buf, start, n in cases():
        a, b = rust(buf, start, n), cy_walk(buf, start, n)
        assert a == b, (name, a, b)
    for bad in ((b"x" * 10, 5, 10), (b"x" * 10, -1, 1)):
        for f in (rust, cy_walk):
            try:
                f(*bad)
            except (ValueError, OverflowError):
                continue
            raise AssertionError(f"{f} read outside its buffer: {bad}")
    print("Rust (PyO3) and Cython walks agree on every case (and both refuse a range outside the buffer)")

    one = blob(1, 61)
    rows = [("a call: one 61-byte batch, the tuple back (ns)", 200_000, 1,
             lambda f: (lambda: f(one, 0, 61)))]
    for size in (80, 1100):
        b = blob((1 << 20) // size, size)
        rows.append((f"a walk: 1 MiB of {size} B batches, per batch (ns)", 20, (1 << 20) // size,
                     lambda f, b=b: (lambda: f(b, 0, len(b)))))
    so = Path(core.__file__)
    print(f"\n{platform.processor() or platform.machine()}, Python {platform.python_version()}, best of {args.trials}")
    print(f"{'':52s} {'Rust (PyO3)':>12s} {'Cython':>10s} {'no core':>12s}")
    for label, loops, per, make in rows:
        r = best_ns(make(rust), loops, args.trials) / per
        c = best_ns(make(cy_walk), loops, args.trials) / per
        p = best_ns(make(py_walk), max(1, loops // 50), 3) / per
        print(f"{label:52s} {r:12.1f} {c:10.1f} {p:12.1f}")
    print(f"\nbuilt: Rust {so.stat().st_size / 1e3:.0f} kB (the whole core: the stamped read and both walks; "
          f"cargo's release build, lto), Cython {cy_bytes / 1e3:.0f} kB in {cy_build_s:.1f} s (gcc -O3)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())

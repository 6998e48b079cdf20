"""Load bench/gen_traces.py (the trace generator shared with the benchmark)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load() -> ModuleType:
    path = Path(__file__).parents[2] / "bench" / "gen_traces.py"
    spec = importlib.util.spec_from_file_location("gen_traces", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_traces"] = mod  # dataclasses look their module up while it executes
    spec.loader.exec_module(mod)
    return mod

"""Replays every input the fuzzer ever crashed on (tests/data/fuzz-regressions/) and the
captured seed conversations through the fuzz target: only ProtocolError may come out."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import CORE, one_input, seeds

REGRESSION_DIR = Path(__file__).parents[1] / "data" / "fuzz-regressions"
REGRESSIONS = sorted(p for p in REGRESSION_DIR.glob("*") if p.is_file() and p.name != "README.md")
# inputs found and not fixed yet: each an expected failure with its reason (strict: the day one
# passes, the run says so, and its entry goes)
OPEN: dict[str, str] = {}


def test_the_regression_corpus_is_there() -> None:
    """A renamed or lost directory would parametrize the replay over nothing and pass."""
    assert len(REGRESSIONS) >= 4, REGRESSION_DIR


# (the routed road is the native core's: without it there is nothing to differ)
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xfail(CORE is not None, reason=OPEN[p.name],
                                                                          strict=True, raises=AssertionError))
                                  if p.name in OPEN else p for p in REGRESSIONS],
                         ids=[p.name for p in REGRESSIONS])
def test_crash_found_by_fuzzing_stays_fixed(path: Path) -> None:
    one_input(path.read_bytes())


def test_every_open_input_is_in_the_corpus() -> None:
    assert set(OPEN) <= {p.name for p in REGRESSIONS}


def test_seed_conversations_run_clean() -> None:
    n = 0
    for s in seeds():
        one_input(s)
        n += 1
    assert n > 50

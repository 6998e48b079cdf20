"""The goals every test judged by the broker's clock holds fetchlat to (``verify/report.py``'s
GOALS, the same ``fetchlat verify --check`` holds a user's own broker to), and the misses known.

A test gathers its fetches joined with the broker's request log (``judge``, ``verify/report.py``'s:
the agreement figures and the bias of true local per outcome, fetchlat's local minus the broker's
own plus the network between proxy and broker), then ends with ``hold``:

- a goal missed that the test does not list as known fails the test;
- a goal missed that it lists (``KnownMiss``: the figures measured and why it is not met yet) makes
  the test an expected failure that names the figure and the reason, instead of a bar widened
  until it passes;
- a goal listed as a known miss that holds on this run says so (a ``GoalMetNow`` warning in the
  test summary): the day it holds on every run, its entry goes.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from fetchlat.verify import report
from fetchlat.verify.report import judge as judge  # the figures a test holds: fetchlat verify's


@dataclass(frozen=True)
class KnownMiss:
    """A goal not met yet: ``goal`` a ``report.Miss.goal`` (``abs_err_p99_ms``,
    ``local_bias_ms:woken``, ...), ``measured`` what the runs gave, ``reason`` why."""

    goal: str
    measured: str
    reason: str


class GoalMetNow(UserWarning):
    """A goal listed as a known miss held on this run."""


def hold(name: str, figures: dict[str, Any], known: Sequence[KnownMiss] = (), *, kind: str = "consumer") -> None:
    """Hold ``figures`` to the goals; call it last (an expected failure ends the test)."""
    hold_all([(name, figures, known)], kind=kind)


def hold_all(judged: Sequence[tuple[str, dict[str, Any], Sequence[KnownMiss]]], *, kind: str = "consumer") -> None:
    """Hold several sets of fetches of one test to the goals at once: any goal missed and not known
    in any set fails the test, before the known misses of all of them make it an expected failure."""
    unknown: list[str] = []
    expected: list[str] = []
    for name, figures, known in judged:
        misses = report.missed({"kinds": {kind: figures}})
        known_by = {k.goal: k for k in known}
        missed_goals = {m.goal for m in misses}
        for k in known:
            if k.goal not in missed_goals:
                warnings.warn(GoalMetNow(f"{name}: goal {k.goal} held on this run (known miss: {k.measured})"),
                              stacklevel=3)
        unknown += [f"{name}: {m.text}; figures {figures}" for m in misses if m.goal not in known_by]
        expected += [f"{name}: {m.text}; {known_by[m.goal].reason} (measured before: {known_by[m.goal].measured})"
                     for m in misses if m.goal in known_by]
    assert not unknown, "goals missed: " + " | ".join(unknown)
    if expected:
        pytest.xfail(" | ".join(expected))

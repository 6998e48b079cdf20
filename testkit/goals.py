"""The goals every test judged by the broker's clock holds fetchlat to (``verify/report.py``'s
GOALS, the same ``fetchlat verify --check`` holds a user's own broker to), and the misses known.

A test gathers its fetches joined with the broker's request log (``judge``, ``verify/report.py``'s:
the agreement figures and the bias of true local per outcome, fetchlat's local minus the broker's
own plus the network between proxy and broker), then ends with ``hold``:

- a goal missed that the test does not list as known fails the test;
- a goal missed that it lists (``KnownMiss``: the worst figure measured, the figures and why it is
  not met yet) makes the test an expected failure that names the figure and the reason, instead
  of a bar widened until it passes; but a run worse than the worst measured by more than
  ``WORSE_BY`` fails, so a known miss still catches a regression;
- a miss the broker's own timing sets (an error's p99 on a machine so busy the broker itself is
  slow) can also name ``of_broker_local``: the largest share of the broker's own local-time p99
  measured for it, so a run on a loaded machine is held to what that load allows and a quiet run
  still to the absolute worst;
- a test cannot list every goal as known (its verdict could not fail);
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

# A run of a known miss fails when it is worse than the worst figure measured by more than this:
# an error or a bias this many times the worst, a share whose shortfall from 100 % is this many
# times the worst one's. Under twice: a miss that gets twice as bad fails.
WORSE_BY = 1.75
# every goal a set of fetches is held to (a test that lists all of them as known cannot fail)
EVERY_GOAL = frozenset({"matched_share", "outcome_agree_share", "abs_err_p50_ms", "abs_err_p99_ms",
                        "local_bias_ms:immediate", "local_bias_ms:woken", "local_bias_ms:expired"})


@dataclass(frozen=True)
class KnownMiss:
    """A goal not met yet: ``goal`` a ``report.Miss.goal`` (``abs_err_p99_ms``,
    ``local_bias_ms:woken``, ...), ``worst`` the worst figure measured in the goal's unit (a share
    for the ``_share`` goals, ms for the others, a bias by its size), ``measured`` what the runs
    gave, ``reason`` why. ``of_broker_local`` (ms goals only): the largest ratio of the figure to
    the broker's own local-time p99 (``broker_local_p99_ms``) measured on the same runs, for a
    miss that grows with the broker's own slowness."""

    goal: str
    worst: float
    measured: str
    reason: str
    of_broker_local: float | None = None

    def limit(self, figures: dict[str, Any] | None = None) -> float:
        """The figure past which a run fails: ``WORSE_BY`` times as bad as ``worst`` or, with
        ``of_broker_local``, as this run's broker-local p99 times that ratio, whichever is more."""
        if self.goal.endswith("_share"):
            return 1.0 - WORSE_BY * (1.0 - self.worst)
        worst = self.worst
        broker_local = (figures or {}).get("broker_local_p99_ms")
        if self.of_broker_local is not None and isinstance(broker_local, (int, float)) and broker_local == broker_local:
            worst = max(worst, self.of_broker_local * broker_local)
        return WORSE_BY * worst

    def worse(self, figure: float, figures: dict[str, Any] | None = None) -> bool:
        limit = self.limit(figures)
        return figure < limit if self.goal.endswith("_share") else figure > limit


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
        assert set(known_by) < EVERY_GOAL, f"{name}: the known misses list every goal (or one no goal names)"
        missed_goals = {m.goal for m in misses}
        for k in known:
            if k.goal not in missed_goals:
                warnings.warn(GoalMetNow(f"{name}: goal {k.goal} held on this run (known miss: {k.measured})"),
                              stacklevel=3)
        unknown += [f"{name}: {m.text}; figures {figures}" for m in misses if m.goal not in known_by]
        unknown += [f"{name}: {m.text}, worse than the known miss's worst {known_by[m.goal].worst:g} by more than "
                    f"{WORSE_BY}x (past {known_by[m.goal].limit(figures):g}); figures {figures}"
                    for m in misses if m.goal in known_by and known_by[m.goal].worse(m.figure, figures)]
        expected += [f"{name}: {m.text}; {known_by[m.goal].reason} (measured before: {known_by[m.goal].measured})"
                     for m in misses if m.goal in known_by and not known_by[m.goal].worse(m.figure, figures)]
    assert not unknown, "goals missed: " + " | ".join(unknown)
    if expected:
        pytest.xfail(" | ".join(expected))

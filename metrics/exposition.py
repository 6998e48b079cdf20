"""The text a scrape of ``/metrics`` answers: a registry in Prometheus' text format, the same bytes
as prometheus_client's ``generate_latest``, written faster.

The proxy's own families (``fast.py``) write their text themselves (``render``: each series'
line beginnings made once, the numbers written at each scrape); every other collector of the
registry (process, interpreter, gauges, build info) goes through ``generate_latest``, in the
registry's order. A scrape renders on the admin endpoint's thread while the event loop waits for
the interpreter: its length is how long the loop may wait (``proxy/interpreter.py``).

Owns: the order of a scrape's text. Must never: take the loop's time for a scrape
(``proxy/admin.py`` calls it on its own thread).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .fast import FastCounter, FastHistogram


class _Metrics(Collector):
    """A run of collected families, for ``generate_latest`` (which only calls ``collect``)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def _collectors(registry: CollectorRegistry) -> list[Any] | None:
    """The registry's collectors in the order ``collect`` takes them; None where this
    prometheus_client keeps them otherwise, or adds a family of its own (``target_info``)."""
    lock = getattr(registry, "_lock", None)
    names = getattr(registry, "_collector_to_names", None)
    if lock is None or not isinstance(names, dict) or getattr(registry, "_target_info", None):
        return None
    with lock:
        return list(names)


def render(registry: CollectorRegistry) -> bytes:
    """``registry`` as ``generate_latest(registry)`` writes it."""
    collectors = _collectors(registry)
    if collectors is None:
        return generate_latest(registry)
    out: list[str] = []
    others: list[Metric] = []
    for c in collectors:
        if isinstance(c, (FastHistogram, FastCounter)):
            if others:
                out.append(generate_latest(_Metrics(others)).decode())
                others = []
            c.render(out)
        else:
            others.extend(c.collect())
    if others:
        out.append(generate_latest(_Metrics(others)).decode())
    return "".join(out).encode()

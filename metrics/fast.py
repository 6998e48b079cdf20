"""Lock-free counters and histograms for the proxy's hot path, exposed exactly as
prometheus_client's own (same names, labels, bucket bounds and text; a test compares the two).

prometheus_client takes a mutex per ``inc`` and walks the bucket list per ``observe`` and
validates labels per ``labels()``; on the proxy's event loop, where a fetch updates a dozen
series, that was a measurable share of the CPU per request. Here a child is a plain object: a
``labels()`` hit is one dict lookup, ``observe`` is a binary search and two additions. Only the event
loop thread writes; a scrape (another thread) reads copies, so it may see an observation's
bucket before its sum — never a count that disagrees with its buckets.

A scrape writes each family's text itself (``render``, for ``metrics/exposition.py``), the same
bytes as prometheus_client's ``generate_latest``: each series' line beginnings (its name and
labels, escaped and sorted as that function writes them) are made once, at its first scrape,
and kept on the child; a scrape then writes only the numbers. A soak sidecar's 4 600 lines took
60-90 ms of Python a scrape through ``generate_latest`` (a sample object per line, its labels
sorted and escaped every time), the event loop waiting for the interpreter meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import cast

from librt.vecs import vec
from mypy_extensions import i64
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

_go_float = cast(Callable[[float], str], floatToGoString)  # the "le" text prometheus_client writes


def _escape(value: str) -> str:
    """A label value as the text format writes it (prometheus_client's own rule)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _labels(pairs: list[tuple[str, str]]) -> str:
    """``{name="value",...}`` sorted by name, as ``generate_latest`` writes a sample's labels; "" for none."""
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs)) + "}"


def _help(name: str, doc: str, kind: str) -> str:
    """A family's HELP and TYPE lines, as ``generate_latest`` writes them."""
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def _count_text(n: int) -> str:
    """``floatToGoString`` of a whole count: ``repr`` of the float, up to Go's switch to exponents."""
    return f"{n}.0" if 0 <= n < 1_000_000 else _go_float(float(n))


class HistogramChild:
    """One series: bounds and counts in librt's vectors of machine numbers, so the compiled
    build observes without a boxed int or float per sample and without a call into bisect.
    ``text``: its lines' beginnings, made at its first scrape (``FastHistogram.render``)."""

    __slots__ = ("bounds", "counts", "sum", "text")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds: vec[float] = vec[float](bounds)
        self.counts: vec[i64] = vec[i64]([0] * (len(bounds) + 1))  # the last one is +Inf
        self.sum = 0.0
        self.text: list[str] | None = None

    def observe(self, amount: float) -> None:
        bounds = self.bounds
        lo: i64 = 0
        hi: i64 = len(bounds)
        while lo < hi:  # the first bound >= amount (le: amount <= bound), as bisect_left
            mid = (lo + hi) >> 1
            if bounds[mid] < amount:
                lo = mid + 1
            else:
                hi = mid
        self.counts[lo] += 1
        self.sum += amount


class CounterChild:
    __slots__ = ("text", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.text: str | None = None  # its line's beginning, made at its first scrape

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        self.value += amount


class _Family(Collector):
    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = (),
                 registry: CollectorRegistry | None = None) -> None:
        self.name, self.doc, self.labelnames = name, doc, list(labelnames)
        self._children: dict[tuple[str, ...], object] = {}
        if not self.labelnames:
            self._children[()] = self._new()
        if registry is not None:
            registry.register(self)

    def _new(self) -> object:
        raise NotImplementedError

    def _child(self, values: tuple[str, ...]) -> object:
        c = self._children.get(values)
        if c is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, got {len(values)}")
            key = tuple(str(v) for v in values)
            c = self._children.get(key)
            if c is None:
                c = self._children[key] = self._new()
        return c


class FastHistogram(_Family):
    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float],
                 registry: CollectorRegistry | None = None) -> None:
        self.bounds = tuple(float(b) for b in buckets if b != float("inf"))
        self.les = [_go_float(b) for b in self.bounds] + ["+Inf"]  # each bucket's "le", as the text writes it
        super().__init__(name, doc, labelnames, registry)

    def _new(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def labels(self, *values: str) -> HistogramChild:
        return self._child(values)  # type: ignore[return-value]

    def observe(self, amount: float) -> None:
        self._children[()].observe(amount)  # type: ignore[attr-defined]

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        les = self.les
        for key, child in list(self._children.items()):
            assert isinstance(child, HistogramChild)
            counts, total = list(child.counts), child.sum
            cumulative, acc = [], 0
            for le, n in zip(les, counts, strict=True):
                acc += n
                cumulative.append((le, acc))
            fam.add_metric(list(key), cumulative, total)
        yield fam

    def render(self, out: list[str]) -> None:
        """This family's text, as ``generate_latest`` writes it, appended to ``out``."""
        name = self.name
        out.append(_help(name, self.doc, "histogram"))
        for key, child in list(self._children.items()):
            assert isinstance(child, HistogramChild)
            text = child.text
            if text is None:
                pairs = list(zip(self.labelnames, key, strict=True))
                text = [f"{name}_bucket{_labels([*pairs, ('le', le)])} " for le in self.les]
                plain = _labels(pairs)
                text += [f"{name}_count{plain} ", f"{name}_sum{plain} "]
                child.text = text
            counts, total = list(child.counts), child.sum
            acc = 0
            i = 0
            for n in counts:
                acc += n
                out.append(f"{text[i]}{_count_text(acc)}\n")
                i += 1
            out.append(f"{text[i]}{_count_text(acc)}\n{text[i + 1]}{_go_float(total)}\n")


class FastCounter(_Family):
    def _new(self) -> CounterChild:
        return CounterChild()

    def labels(self, *values: str) -> CounterChild:
        return self._child(values)  # type: ignore[return-value]

    def inc(self, amount: float = 1.0) -> None:
        self._children[()].inc(amount)  # type: ignore[attr-defined]

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.doc, labels=self.labelnames)

    def collect(self) -> Iterator[CounterMetricFamily]:
        fam = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for key, child in list(self._children.items()):
            assert isinstance(child, CounterChild)
            fam.add_metric(list(key), child.value)
        yield fam

    def render(self, out: list[str]) -> None:
        """This family's text, as ``generate_latest`` writes it, appended to ``out``."""
        name = (self.name[:-6] if self.name.endswith("_total") else self.name) + "_total"
        out.append(_help(name, self.doc, "counter"))
        for key, child in list(self._children.items()):
            assert isinstance(child, CounterChild)
            text = child.text
            if text is None:
                text = child.text = f"{name}{_labels(list(zip(self.labelnames, key, strict=True)))} "
            out.append(f"{text}{_go_float(child.value)}\n")

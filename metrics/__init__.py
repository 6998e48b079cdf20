"""fetchlat.metrics: the latency model (pure) and thin Prometheus / trace adapters."""

from ..protocol import compiled

compiled.install()  # which build of the hot path runs (protocol/compiled.py)

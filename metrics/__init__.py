"""fetchlat.metrics: the latency model (pure) and thin Prometheus / trace adapters."""

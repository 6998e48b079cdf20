"""The one place fetchlat reads clocks. Intervals use the monotonic clock (ns)."""

import time

now_ns = time.monotonic_ns
wall_ns = time.time_ns

"""How the proxy's threads share the interpreter: the event loop's thread gets it back within a
millisecond.

The proxy runs Python on three kinds of thread: the event loop (every byte of every client), the
admin server (a Prometheus scrape renders every series: a soak sidecar with its clients' series
answers 4 600 lines, 420 KB), and the trace writer (Arrow conversion, which lets go after each
column: ``proxy/traces.py``). Only one runs Python at a time. A thread that wants the interpreter
waits until the one holding it lets go, which CPython forces every *switch interval*: 5 ms by
default. So while a scrape renders, every read, write and tick of the loop waits up to 5 ms for
each turn: measured on a 3-broker soak scraped every 10 s, 1 % of the 100 ms ticks came more than
5 ms late (the loop lag goal's p99), one or two per scrape.

``SWITCH_INTERVAL_S`` is 1 ms: the loop waits at most that for its turn. A switch costs a few
microseconds, and only when two threads want the interpreter at once (an idle writer or admin
thread never does). And a scrape is short: the proxy's families write their own text
(``metrics/exposition.py``), 0.8 ms for 4 380 lines where prometheus_client's ``generate_latest``
took 28 ms (60-90 ms on a busy soak sidecar). ``make bench-gil`` (``bench/scrape_gil.py``)
measures a loop's wake-up lateness while another thread renders a registry of that size: through
``generate_latest`` at 5 ms and at 1 ms, and through the proxy's renderer at 1 ms.
"""

from __future__ import annotations

import sys
from typing import Final

SWITCH_INTERVAL_S: Final = 0.001


def share_interpreter() -> float:
    """Make the proxy's threads hand the interpreter over every ``SWITCH_INTERVAL_S``; returns
    the interval it was."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return before

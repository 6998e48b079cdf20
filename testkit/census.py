"""Reading the heap censuses a proxy logs (``kill -USR1``, ``proxy/memory.py``'s ``census``) back
out of its log: the soak's summary and the tests that ask a running proxy what it holds."""

from __future__ import annotations

import re

CENSUS = re.compile(r"heap census: (\d+) tracked objects .*?, (\d+) memory blocks(?:, (\d+) interpreter arenas[^;]*)?; "
                    r"by type: ([^;]*)(?:; (.*))?$")


def census_lines(log: str) -> list[tuple[int, int, int, dict[str, int], str]]:
    """The heap censuses in a proxy's log, of its last process only (a restarted sidecar appends
    to the same log; each start logs its metrics address first), in order: (tracked objects,
    memory blocks, the interpreter's 1 MiB arenas (-1 when not said), count by type, and with
    ``PYTHONTRACEMALLOC`` the source lines whose allocations grew since the first census)."""
    out = []
    for line in log[log.rfind("metrics and health on"):].splitlines():
        m = CENSUS.search(line)
        if m:
            types = dict((name, int(n)) for name, n in (part.rsplit(" ", 1) for part in m.group(4).split(", ")))
            out.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or -1), types, m.group(5) or ""))
    return out

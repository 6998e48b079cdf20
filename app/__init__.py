"""fetchlat.app: the shell around the packages. ``cli`` is the ``fetchlat`` command: it builds
one parser from the subcommands each package owns (``proxy/cli.py``, ``capture/run.py``,
``analysis/cli.py``, ``perf/cli.py``) and dispatches; ``demo`` is ``fetchlat demo``. Nothing
below imports this package."""

import os
import sys

# Arrow's buffers from glibc's allocator, not the mimalloc the pyarrow wheels default to (a user's
# ARROW_DEFAULT_MEMORY_POOL wins): Arrow fixes its process-wide pool when pyarrow loads, and the
# Parquet writer's own buffers take that pool whatever pyarrow.set_memory_pool says later, so it
# is chosen here, before any subcommand imports pyarrow (proxy/traces.py, ``use_system_pool``).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

if sys.argv[1:2] == ["proxy"]:
    # every thread of a proxy allocates from glibc's main heap: set before the first thread starts,
    # and loading pyarrow (the trace schema) starts two, its allocator's and numpy's BLAS'
    from ..proxy.memory import one_arena

    one_arena()

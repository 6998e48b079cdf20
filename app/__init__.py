"""fetchlat.app: the shell around the packages. ``cli`` is the ``fetchlat`` command: it builds
one parser from the subcommands each package owns (``proxy/cli.py``, ``capture/run.py``,
``analysis/cli.py``, ``perf/cli.py``) and dispatches; ``demo`` is ``fetchlat demo``. Nothing
below imports this package."""

import os

# Arrow's buffers from glibc's allocator, not the mimalloc the pyarrow wheels default to (a user's
# ARROW_DEFAULT_MEMORY_POOL wins): Arrow fixes its process-wide pool when pyarrow loads, and the
# Parquet writer's own buffers take that pool whatever pyarrow.set_memory_pool says later, so it
# is chosen here, before any subcommand imports pyarrow (proxy/traces.py, ``use_system_pool``).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

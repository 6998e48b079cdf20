"""``python -m fetchlat.app ...``: the ``fetchlat`` command without its console script."""

import sys

from .cli import main

sys.exit(main())

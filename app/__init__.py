"""fetchlat.app: the shell around the packages. ``cli`` is the ``fetchlat`` command: it builds
one parser from the subcommands each package owns (``proxy/cli.py``, ``capture/run.py``,
``analysis/cli.py``, ``perf/cli.py``) and dispatches; ``demo`` is ``fetchlat demo``. Nothing
below imports this package."""

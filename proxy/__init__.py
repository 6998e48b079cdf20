"""fetchlat.proxy: the I/O layer (sockets, the event loop, the clock), the pure per-connection
core it drives, and the command lines."""

from ..protocol import compiled

compiled.install()  # which build of the hot path runs (protocol/compiled.py)

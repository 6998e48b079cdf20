"""fetchlat.protocol: the sans-I/O Kafka codec.

Owns: framing, headers, request/response correlation, spec-driven walkers and the address
rewriters. Must never: touch sockets, asyncio, clocks or metrics libraries. Bytes and
timestamps come in, events and output segments go out.
"""

from . import compiled

compiled.install()  # before any module of the package loads: which build of the hot path runs

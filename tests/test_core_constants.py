"""Every constant the native core shares with Python code, held to the core's value in one place.

The core owns these values (``native/src/``). Where Python holds one as a literal -- the compiled
loops step by constants, and the Python road must run without the core -- it is listed here with
the core's name for it; a constant the core exports that Python only reads from the module is
listed as such. A constant the core adds must be placed in one of the two lists, so no literal
drifts from its owner unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fetchlat import native
from fetchlat.protocol import apis, digested, requests, routed, stream
from fetchlat.proxy import clock, relayed, stamps

CORE = native.core()
pytestmark = pytest.mark.skipif(CORE is None, reason=f"native core: {native.reason()}")

# the core's name -> the Python literals that must equal it (a value, or a tuple in its order)
MIRRORED: dict[str, Callable[[], Any]] = {
    "READ_BYTES": lambda: stamps.READ_BYTES,
    "STAMP_CONTROL": lambda: (stamps.SO_TIMESTAMPNS, stamps.ANCILLARY_BYTES),
    "STAMP_OFFSET": lambda: (clock.OFFSET_REFRESH_NS, clock.OFFSET_TRIES, clock.TIGHT_NS),
    "DIGEST_STATS_WIDTH": lambda: digested.STATS.size // 8,
    "DIGEST_MAX_ARRAY": lambda: stream.MAX_ARRAY,
    "DIGEST_MAX_TAGS": lambda: stream.MAX_TAGS,
    "BATCH_HEADER_BYTES": lambda: stream.BATCH_HEADER_BYTES,
    "BATCH_ATTRIBUTES": lambda: (stream.TIMESTAMP_TYPE_LOG_APPEND, stream.CONTROL_BATCH),
    "RELAY_KINDS": lambda: relayed.KINDS,
    "RELAY_ITEM_WIDTH": lambda: relayed.ITEM_WIDTH,
    "RELAY_PRESENT": lambda: relayed.PRESENT,
    "WIRE_RECORD_WIDTH": lambda: routed.RECORD_WIDTH,
    "WIRE_FLAGS": lambda: (routed.EXPECTS_RESPONSE, routed.OBSERVED, routed.HEADER_UNREADABLE, routed.SASL_V0,
                           routed.ACKS_UNREADABLE),
    "WIRE_ROUTED": lambda: routed.ROUTED,
    "WIRE_ASKED": lambda: routed.ASKED,
    "WIRE_KINDS": lambda: (routed.KIND_REQUEST, routed.KIND_RESPONSE),
    "WIRE_PEEK_BYTES": lambda: requests.REQUEST_PEEK_BYTES,
    "WIRE_APIS": lambda: (apis.PRODUCE, apis.CONTROLLED_SHUTDOWN, apis.SASL_HANDSHAKE),
}
# derived literals: the byte widths the compiled loops step by
DERIVED: dict[str, Callable[[], tuple[Any, Any]]] = {
    "an item's bytes": lambda: (relayed.ITEM_BYTES, relayed.ITEM_WIDTH * 8),
    "a record's bytes": lambda: (routed.RECORD_BYTES, routed.RECORD_WIDTH * 8),
}
# exported for Python to read at run time (metrics, docs, tests): no Python literal holds them
READ_FROM_THE_CORE = {"SOURCE", "LAYOUT_SPECS", "RELAY_GATHER_BYTES", "RELAY_BATCH_NS", "RELAY_NOTIFY_ITEMS",
                      "RELAY_NOTIFY_BYTES", "RELAY_QUEUE_MAX_ITEMS", "RELAY_QUEUE_MAX_BYTES", "RELAY_HELD_MAX",
                      "RELAY_SPARE_HELD_BYTES"}


def exported_constants() -> set[str]:
    return {n for n in dir(CORE) if n.isupper() and not n.startswith("_")}


def as_plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


@pytest.mark.parametrize("name", sorted(MIRRORED))
def test_each_python_literal_is_the_cores(name: str) -> None:
    assert as_plain(getattr(CORE, name)) == as_plain(MIRRORED[name]()), name


@pytest.mark.parametrize("what", sorted(DERIVED))
def test_each_derived_literal_follows(what: str) -> None:
    literal, derived = DERIVED[what]()
    assert literal == derived, what


def test_every_exported_constant_is_placed() -> None:
    placed = set(MIRRORED) | READ_FROM_THE_CORE
    assert exported_constants() - placed == set(), "a constant of the core neither mirrored nor read from it"
    assert placed - exported_constants() == set(), "listed here but not exported by the core"

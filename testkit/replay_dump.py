"""Replays conversations through the proxy core of whichever build this process loads and
prints everything that comes out, as JSON: the codec's events, the bytes written each way, the
core's actions, the trace rows and every metric sample. ``tests/test_builds_agree.py`` runs it
once with the compiled build and once with ``FETCHLAT_PURE_PYTHON=1`` and compares the two.

Input on stdin: ``{"plans": [{"run": str, "conn": int, "cuts": [[int, ...], ...]}, ...]}``:
each captured conversation (``tests/data/captures``) with, per frame, where its wire bytes are
cut into chunks (hypothesis draws the cuts; an empty list sends the frame whole).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
from typing import Any

from fetchlat.protocol.connection import KafkaConnection
from fetchlat.proxy.build import hot_path

from testkit.captures import conversations
from testkit.playbook import MS, T0, Playbook

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def plain(x: Any) -> Any:
    """A build-independent picture of a value (no addresses, no class identity)."""
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, bytes | bytearray | memoryview):
        return bytes(x).hex()
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"type": type(x).__name__, **{f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if x is None or isinstance(x, bool | int | float | str):
        return x
    return _ADDRESS.sub("", repr(x))


def chunks(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % len(wire) for c in cuts if c % len(wire)})
    return [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]


def replay(run: str, conn: int, cuts: list[list[int]]) -> dict[str, Any]:
    frames = conversations(run)[conn]
    codec = KafkaConnection()
    pb = Playbook()
    pb.connect_upstream(T0)
    events: list[Any] = []
    actions: list[Any] = []
    t = T0
    for i, f in enumerate(frames):
        for part in chunks(f.wire, cuts[i] if i < len(cuts) else []):
            t += MS
            if f.direction == "req":
                events.append(plain(codec.receive_from_client(part, t)))
                actions.append(plain(pb.client(part, t)))
            else:
                out, ev = codec.receive_from_broker(part, t)
                events.append([plain(b"".join(bytes(s) for s in out)), plain(ev)])
                actions.append(plain(pb.broker(part, t)))
    samples = sorted((m.name, s.name, sorted(s.labels.items()), s.value)
                     for m in pb.prom.collect() for s in m.samples)
    return {"events": events, "actions": actions, "to_broker": plain(b"".join(pb.upstream_writes)),
            "to_client": plain(b"".join(pb.client_writes)), "rows": plain(pb.rows), "samples": samples}


def main() -> None:
    plans = json.load(sys.stdin)["plans"]
    print(json.dumps({"hot_path": hot_path(), "out": [replay(p["run"], p["conn"], p["cuts"]) for p in plans]}))


if __name__ == "__main__":
    main()

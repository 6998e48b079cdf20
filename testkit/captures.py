"""Golden frames captured from real clients talking to Tansu (see data/captures/README.md)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

CAPTURES = Path(__file__).parents[1] / "tests" / "data" / "captures"
RUNS = sorted(p.name.removesuffix(".frames.jsonl") for p in CAPTURES.glob("*.frames.jsonl"))


@dataclass(frozen=True)
class Frame:
    conn: int
    direction: str  # req | resp
    api_key: int
    api_version: int
    body: bytes  # without the size prefix

    @property
    def wire(self) -> bytes:
        return len(self.body).to_bytes(4, "big") + self.body


def frames(run: str) -> list[Frame]:
    out = []
    for line in (CAPTURES / f"{run}.frames.jsonl").read_text().splitlines():
        d = json.loads(line)
        out.append(Frame(d["conn"], d["dir"], d["api_key"], d["api_version"], bytes.fromhex(d["hex"])))
    return out


def conversations(run: str) -> dict[int, list[Frame]]:
    by_conn: dict[int, list[Frame]] = defaultdict(list)
    for f in frames(run):
        by_conn[f.conn].append(f)
    return dict(by_conn)

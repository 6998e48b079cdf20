"""Which files one fetch crosses, from request bytes to metric sample and trace row: a long
poll driven through the proxy core (``testkit/playbook.py``, the same objects the proxy
runs) with a profiler noting every call that enters another fetchlat file.

    python bench/fetch_road.py      # the distinct files, and the file-to-file hops in order
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testkit.frames import empty_fetch_response, fetch_request  # noqa: E402
from testkit.playbook import MS, T0, Playbook  # noqa: E402

PACKAGES = ("protocol", "metrics", "proxy")


def ours(frame: FrameType) -> str | None:
    f = Path(frame.f_code.co_filename)
    try:
        rel = f.resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts[0] in PACKAGES else None


def main() -> None:
    pb = Playbook()
    pb.connect_upstream(T0)
    pb.client(fetch_request(1), T0)  # warm: the first exchange builds metric children
    pb.broker(empty_fetch_response(1), T0 + 501 * MS)
    hops: list[str] = []

    def prof(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        name = ours(frame)
        if name is not None and (not hops or hops[-1] != name):
            hops.append(name)

    request, response = fetch_request(2), empty_fetch_response(2)  # built before: not part of the road
    sys.setprofile(prof)
    pb.client(request, T0 + 600 * MS)
    pb.broker(response, T0 + 1101 * MS)
    sys.setprofile(None)
    files = sorted(set(hops))
    print(f"{len(files)} files, {len(hops) - 1} file-to-file hops (calls entering another file)")
    for f in files:
        print(f"  {f}: entered {hops.count(f)} time(s)")
    print("road: " + " -> ".join(Path(h).stem for h in hops))


if __name__ == "__main__":
    main()

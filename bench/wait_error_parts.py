"""Where a fetch's wait error lies, judged per fetch against the broker's request log: in when
the wait began, in when it ended, or outside the broker's log.

    python bench/wait_error_parts.py RUN_DIR [--kind follower|consumer|share]

``RUN_DIR`` holds ``traces/`` (fetchlat's trace rows) and one or more
``.../node-N/logs/request.log`` (Kafka's request log at DEBUG, as ``tests/integration`` leave
them under pytest's ``--basetemp``). Each fetch of the kind is joined to its line
(``verify/request_log.py``). For the fetches the broker parked (woken, and expired), on the
proxy's clock from the request forwarded:

- the broker's wait began after its queue and local time (``requestQueueTimeMs + localTimeMs``)
  and ended ``remoteTimeMs`` later;
- fetchlat's began where the model starts a wait for that kind (``metrics/model.py``: 0 for a
  consumer, ``FOLLOWER_PARK_NS``, ``SHARE_PARK_NS`` or ``SHARE_PARK_ACKS_NS``) and ended its
  ``wait_ns`` later.

``start`` is fetchlat's start less the broker's, ``end`` the same for the ends: the wait error
(fetchlat's wait less ``remoteTimeMs``) is ``end - start``. Then what the error would be were
each broker time known to the proxy: its start (``end``: the error less the start's), and its time after waking
as well (``start and answer known``: the end dated by the first response byte less the broker's response
queue and send time). What is left then lies outside the broker's log: the time from the
proxy's forwarding to the broker's network thread reading the request, and the loopback.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fetchlat.metrics.model import FOLLOWER_PARK_NS, SHARE_PARK_ACKS_NS, SHARE_PARK_NS
from fetchlat.verify import request_log as rl

NS_PER_MS = 1_000_000


def park_ms(pair: rl.Pair) -> float:
    """Where fetchlat starts this fetch's wait, ms after it was forwarded."""
    if pair.row["api"] == "ShareFetch":
        ns = SHARE_PARK_ACKS_NS if pair.broker.acknowledgements else SHARE_PARK_NS
    else:
        ns = FOLLOWER_PARK_NS if pair.row["kind"] == "follower" else 0
    return float(ns) / NS_PER_MS


def parts(pair: rl.Pair) -> dict[str, float]:
    b, r = pair.broker, pair.row
    park = park_ms(pair)
    before = b.request_queue_ms + b.local_ms
    wait = (r["wait_ns"] or 0) / NS_PER_MS
    end = park + wait
    answered = (r["first_byte_ns"] or 0) / NS_PER_MS - b.response_queue_ms - b.send_ms
    return {"start": park - before,
            "end (the error, start known)": end - (before + b.remote_ms),
            "error (end - start)": wait - b.remote_ms,
            "the error, start and answer known": answered - before - b.remote_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--kind", choices=("follower", "consumer", "share"), default="follower")
    a = ap.parse_args()
    api = "ShareFetch" if a.kind == "share" else "Fetch"
    rows = [r for r in rl.trace_rows(a.run / "traces", api)
            if a.kind == "share" or r["kind"] == a.kind]
    logged = []
    for log in sorted(a.run.glob("**/node-*/logs/request.log")):
        node = log.parent.parent.name.removeprefix("node-")
        logged += [r for r in rl.read(log, node, [rl.API_KEYS[api]]) if r.client_id != "fetchlat-calibration"
                   and (a.kind != "follower" or r.listener == "BROKER")]
    pairs, unmatched = rl.join(rows, logged)
    print(f"{a.run}: {len(rows)} {a.kind} fetches, {len(pairs)} found in {len(logged)} request-log lines "
          f"({len(unmatched)} not)")

    def q(values: list[float], f: float) -> str:
        return f"{rl.quantile(values, f):+8.2f}"

    def m(values: list[float], f: float) -> str:
        return f"{rl.quantile(values, f):7.2f}"

    for outcome in ("woken", "expired"):
        ps = [p for p in pairs if rl.broker_outcome(p.broker) == outcome]
        if not ps:
            continue
        print(f"\n{outcome}: {len(ps)} fetches, fetchlat less the broker (ms)"
              "    p10      p50      p90      p99   |p50|   |p99|")
        split = [parts(p) for p in ps]
        for name in split[0]:
            v = [s[name] for s in split]
            mag = [abs(x) for x in v]
            print(f"  {name:34s} {q(v, .1)} {q(v, .5)} {q(v, .9)} {q(v, .99)} {m(mag, .5)} {m(mag, .99)}")


if __name__ == "__main__":
    main()

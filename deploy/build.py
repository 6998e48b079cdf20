"""Builds the generated deploy files: the Grafana dashboards in ``grafana/dashboards/`` from the
panel lists below, and ``kubernetes/prometheusrule.yaml`` from ``prometheus/alerts.yml``.

    python deploy/build.py          # rewrite them
    python deploy/build.py --check  # exit 1 if a file differs from what this builds

One place for every PromQL expression; tests run each of them against a real Prometheus
scraping a real proxy (tests/integration/test_prometheus.py). Variables: ``$broker``,
``$kind``, ``$topic``, ``$client`` (multi-value, "All" = ``.*``) and ``$datasource``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "grafana" / "dashboards"
RULES = HERE / "prometheus" / "alerts.yml"
PROMETHEUS_RULE = HERE / "kubernetes" / "prometheusrule.yaml"
RI = "$__rate_interval"
FK = 'broker=~"$broker",kind=~"$kind"'  # the usual filter of fetch families


@dataclass(frozen=True)
class Q:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Q, ...]
    unit: str = "s"
    kind: str = "timeseries"  # timeseries | stat | table | bargauge
    description: str = ""
    width: int = 12
    stack: bool = False
    extra: dict[str, object] = field(default_factory=dict)


def quantile(q: float, family: str, by: str, filt: str = FK) -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({family}_bucket{{{filt}}}[{RI}])))"


def ratio(num: str, den: str) -> str:
    return f"({num}) / ({den})"


TRUTH = [
    Panel("Naive total vs true local vs e2e, p99", (
        Q(quantile(0.99, "fetchlat_fetch_total_seconds", "broker, kind"), "{{broker}} {{kind}} naive total"),
        Q(quantile(0.99, "fetchlat_fetch_local_seconds", "broker, kind"), "{{broker}} {{kind}} true local"),
        Q(quantile(0.99, "fetchlat_fetch_e2e_seconds", "broker, kind"), "{{broker}} {{kind}} e2e"),
    ), description="What other tools report (total, purgatory included) against what the broker spent "
                    "(local = total - wait) and what the client felt (e2e = local + proxy + client RTT)."),
    Panel("Naive total vs true local vs e2e, p50", (
        Q(quantile(0.5, "fetchlat_fetch_total_seconds", "broker, kind"), "{{broker}} {{kind}} naive total"),
        Q(quantile(0.5, "fetchlat_fetch_local_seconds", "broker, kind"), "{{broker}} {{kind}} true local"),
        Q(quantile(0.5, "fetchlat_fetch_e2e_seconds", "broker, kind"), "{{broker}} {{kind}} e2e"),
    )),
    Panel("True local p99 now", (
        Q(quantile(0.99, "fetchlat_fetch_local_seconds", "kind"), "{{kind}}"),
    ), kind="stat", width=6),
    Panel("Naive total p99 now", (
        Q(quantile(0.99, "fetchlat_fetch_total_seconds", "kind"), "{{kind}}"),
    ), kind="stat", width=6),
    Panel("Purgatory wait p50 / p99 by source", (
        Q(quantile(0.5, "fetchlat_fetch_wait_seconds", "source"), "p50 {{source}}"),
        Q(quantile(0.99, "fetchlat_fetch_wait_seconds", "source"), "p99 {{source}}"),
    ), description="reported: the broker's WaitTimeMs; inferred: from max_wait, min_bytes, data and produce traffic"),
    Panel("Outcome mix", (
        Q(f"sum by (outcome) (rate(fetchlat_fetches_total{{{FK}}}[{RI}]))", "{{outcome}}"),
    ), unit="reqps", stack=True),
    Panel("Long-poll efficiency: fetches returning records", (
        Q(ratio(f"sum by (kind) (rate(fetchlat_fetches_with_records_total{{{FK}}}[{RI}]))",
                f"sum by (kind) (rate(fetchlat_fetches_total{{{FK}}}[{RI}]))"), "{{kind}}"),
    ), unit="percentunit"),
    Panel("Share of fetch time parked in purgatory", (
        Q(ratio(f"sum by (kind) (rate(fetchlat_fetch_wait_seconds_sum{{{FK}}}[{RI}]))",
                f"sum by (kind) (rate(fetchlat_fetch_total_seconds_sum{{{FK}}}[{RI}]))"), "{{kind}}"),
    ), unit="percentunit"),
    Panel("Broker wake-up lag p99 (woken fetches: data arrival -> response)", (
        Q(quantile(0.99, "fetchlat_fetch_wake_lag_seconds", "broker"), "{{broker}}"),
    )),
    Panel("Low-confidence and throttled fetches", (
        Q(ratio(f"sum by (kind) (rate(fetchlat_fetch_low_confidence_total{{{FK}}}[{RI}]))",
                f"sum by (kind) (rate(fetchlat_fetches_total{{{FK}}}[{RI}]))"), "low confidence {{kind}}"),
        Q(ratio(f"sum by (kind) (rate(fetchlat_fetch_throttled_total{{{FK}}}[{RI}]))",
                f"sum by (kind) (rate(fetchlat_fetches_total{{{FK}}}[{RI}]))"), "throttled {{kind}}"),
    ), unit="percentunit"),
    Panel("Throttle time the broker asked for, p99 (throttled fetches only)", (
        Q(quantile(0.99, "fetchlat_fetch_throttle_seconds", "broker, kind"), "{{broker}} {{kind}}"),
    ), description="Quota throttling is kept out of local and e2e; empty while no broker throttles."),
    Panel("First byte vs transfer p99", (
        Q(quantile(0.99, "fetchlat_fetch_first_byte_seconds", "kind"), "first byte {{kind}}"),
        Q(quantile(0.99, "fetchlat_fetch_transfer_seconds", "kind"), "transfer {{kind}}"),
    )),
]

REPLICATION = [
    Panel("Follower -> leader true fetch latency p99, per pair", (
        Q(quantile(0.99, "fetchlat_follower_fetch_local_seconds", "broker, follower", 'broker=~"$broker"'),
          "follower {{follower}} -> leader {{broker}}"),
    ), description="Shifts here, on one pair only, are the network grey failures KIP-736 set out to catch."),
    Panel("Follower -> leader true fetch latency p50, per pair", (
        Q(quantile(0.5, "fetchlat_follower_fetch_local_seconds", "broker, follower", 'broker=~"$broker"'),
          "follower {{follower}} -> leader {{broker}}"),
    )),
    Panel("Replication latency p99 per follower (append at leader -> follower fetch confirming it)", (
        Q(quantile(0.99, "fetchlat_replication_seconds", "broker, follower", 'broker=~"$broker"'),
          "follower {{follower}} of {{broker}}"),
    )),
    Panel("Follower fetch outcome mix", (
        Q(f'sum by (broker, outcome) (rate(fetchlat_fetches_total{{broker=~"$broker",kind="follower"}}[{RI}]))',
          "{{broker}} {{outcome}}"),
    ), unit="reqps", stack=True),
    Panel("Produce latency p99 by acks", (
        Q(quantile(0.99, "fetchlat_produce_seconds", "acks", 'broker=~"$broker"'), "acks={{acks}}"),
    )),
    Panel("Produce latency p50 by acks", (
        Q(quantile(0.5, "fetchlat_produce_seconds", "acks", 'broker=~"$broker"'), "acks={{acks}}"),
    )),
    Panel("Records produced by acks", (
        Q(f'sum by (acks) (rate(fetchlat_produced_records_total{{broker=~"$broker"}}[{RI}]))', "acks={{acks}}"),
    ), unit="short", stack=True),
    Panel("Produce throttle the broker asked for, p99 (throttled produces only)", (
        Q(quantile(0.99, "fetchlat_produce_throttle_seconds", "acks", 'broker=~"$broker"'), "acks={{acks}}"),
    ), description="A producer over its quota: the broker answers, then mutes the connection for this "
                    "long. Not part of the produce latency above; empty while no broker throttles."),
]

CF = 'broker=~"$broker",kind=~"consumer|share",client=~"$client"'  # share consumers (KIP-932) too
CONSUMERS = [
    Panel("Record latency p99 per topic (KIP-489)", (
        Q(quantile(0.99, "fetchlat_record_latency_seconds", "topic", 'broker=~"$broker",topic=~"$topic"'),
          "{{topic}}"),
    ), description="Response time minus the newest record's timestamp, per partition fetched."),
    Panel("Record latency max per topic (last 60-120 s)", (
        Q('max by (topic) (fetchlat_record_latency_max_seconds{broker=~"$broker",topic=~"$topic"})', "{{topic}}"),
    )),
    Panel("Record latency p99 per client", (
        Q(quantile(0.99, "fetchlat_client_record_latency_seconds", "client",
                   'broker=~"$broker",client=~"$client"'), "{{client}}"),
    )),
    Panel("Record latency max per client (last 60-120 s)", (
        Q('max by (client) (fetchlat_client_record_latency_max_seconds{broker=~"$broker",client=~"$client"})',
          "{{client}}"),
    )),
    Panel("Slowest clients: mean true local fetch time", (
        Q(f'topk(10, sum by (client) (rate(fetchlat_client_fetch_seconds_total{{{CF},part="local"}}[{RI}])) '
          f'/ sum by (client) (rate(fetchlat_client_fetches_total{{{CF}}}[{RI}])))', "{{client}}"),
    ), kind="bargauge"),
    Panel("Per client: mean naive total, wait and true local", (
        Q(f'sum by (client, part) (rate(fetchlat_client_fetch_seconds_total{{{CF}}}[{RI}])) '
          f'/ on (client) group_left sum by (client) (rate(fetchlat_client_fetches_total{{{CF}}}[{RI}]))',
          "{{client}} {{part}}"),
    )),
    Panel("Fetches per client", (
        Q(f"sum by (client) (rate(fetchlat_client_fetches_total{{{CF}}}[{RI}]))", "{{client}}"),
    ), unit="reqps"),
]

PROXY = [
    Panel("Client connections open (and of them, carried by the native core's relay)", (
        Q("sum by (instance, listener) (fetchlat_connections_active)", "{{instance}} {{listener}}"),
        Q("sum by (instance) (fetchlat_connections_relayed)", "relayed {{instance}}"),
        Q(f"sum by (instance) (increase(fetchlat_relay_handovers_total[{RI}]))", "handed over {{instance}}"),
    ), unit="short", description="With relay: native a sidecar's plaintext connections go to the native core's "
                                 "thread after their first answer; the rest stay on the event loop."),
    Panel("Native relay's queue to the event loop", (
        Q("max by (instance) (fetchlat_relay_queue_items)", "items {{instance}}"),
        Q("max by (instance) (fetchlat_relay_queue_bytes) / 1048576", "MiB {{instance}}"),
        Q(f"sum by (instance) (increase(fetchlat_relay_queue_full_total[{RI}]))", "full {{instance}}"),
        Q("max by (instance) (fetchlat_relay_held_bytes) / 1048576", "MiB held for connections {{instance}}"),
    ), unit="short", description="What the relay's thread queued and the event loop has not taken yet. At its "
                                 "bound (65 536 items or 64 MiB) the relay reads no socket until the loop drains "
                                 "it: 'full' counts those stops, which only a stalled event loop causes."),
    Panel("Connections accepted", (
        Q(f"sum by (instance, listener) (rate(fetchlat_connections_total[{RI}]))", "{{instance}} {{listener}}"),
    ), unit="cps"),
    Panel("Bytes forwarded", (
        Q(f"sum by (instance, direction) (rate(fetchlat_bytes_total[{RI}]))", "{{instance}} {{direction}}"),
    ), unit="Bps"),
    Panel("Requests by api", (
        Q(f'sum by (api) (rate(fetchlat_requests_total{{broker=~"$broker"}}[{RI}]))', "{{api}}"),
    ), unit="reqps", stack=True),
    Panel("Request duration p99 by api (forwarded -> response received)", (
        Q(quantile(0.99, "fetchlat_request_duration_seconds", "api", 'broker=~"$broker"'), "{{api}}"),
    )),
    Panel("Proxy's own added time per response (p50, p99, p99.9)", (
        Q(f"histogram_quantile(0.5, sum by (le) (rate(fetchlat_proxy_added_seconds_bucket[{RI}])))", "p50"),
        Q(f"histogram_quantile(0.99, sum by (le) (rate(fetchlat_proxy_added_seconds_bucket[{RI}])))", "p99"),
        Q(f"histogram_quantile(0.999, sum by (le) (rate(fetchlat_proxy_added_seconds_bucket[{RI}])))", "p99.9"),
    )),
    Panel("Event-loop lag p99 / max bucket", (
        Q(f"histogram_quantile(0.99, sum by (le, instance) (rate(fetchlat_event_loop_lag_seconds_bucket[{RI}])))",
          "p99 {{instance}}"),
    ), description="How late the loop ran its once-a-second timer: every connection on that proxy's loop waited as "
                   "long."),
    Panel("Late ticks by what held the loop (loop_probe)", (
        Q(f"sum by (instance, loop) (increase(fetchlat_event_loop_late_ticks_total[{RI}]))", "{{instance}} {{loop}}"),
    ), unit="short", description="With loop_probe on: each tick 5 ms late, by what the loop's thread did meanwhile. "
                                 "running: a callback (the proxy's log names it); waiting_for_cpu: the node's cores "
                                 "are full; in_poll: asleep past its timer (the kernel's or the hypervisor's timer "
                                 "came late); blocked: the interpreter, a lock or the disk."),
    Panel("What the model learned of its broker (expiry overshoot, first byte, round trip) and the probes", (
        Q("max by (instance) (fetchlat_broker_expiry_overshoot_seconds)", "overshoot {{instance}}"),
        Q("max by (instance) (fetchlat_broker_first_byte_seconds)", "first byte {{instance}}"),
        Q("max by (instance) (fetchlat_broker_round_trip_seconds)", "round trip {{instance}}"),
        Q(f"sum by (instance, result) (increase(fetchlat_calibration_probes_total[{RI}])) / 1000",
          "probes/1000 {{result}} {{instance}}"),
    ), description="The proxy learns how late its broker's purgatory timer lets an expired fetch go (probe "
                   "pairs on its own connection: every 0.1 s until it holds 31 samples, then every 30 s); "
                   "--expiry-overshoot-ms sets it instead. First byte: how long the broker takes to start "
                   "answering a fetch that does not park. Round trip: the network to the brokers (a proxy "
                   "away from them takes it off a produce's answer)."),
    Panel("Event-loop tasks (flat in a healthy proxy)", (
        Q("sum by (instance) (fetchlat_event_loop_tasks)", "{{instance}}"),
    ), unit="short", description="asyncio tasks alive on each proxy's loop: one per listener and the discovery; "
                                 "connections are protocols, not tasks, so a count that grows is a leak."),
    Panel("Entries held by the proxy's bounded structures", (
        Q("sum by (instance, structure) (fetchlat_held_entries)", "{{structure}} {{instance}}"),
    ), unit="short", description="Connections, the partitions the model follows, topics and leaders known, "
                                 "brokers: each has a bound or goes with what it belongs to. One that keeps "
                                 "rising under steady traffic is filling toward its bound (RSS follows it)."),
    Panel("Response receive stamps by source (kernel: packet arrival; clock: when the loop read it)", (
        Q(f"sum by (instance, source) (rate(fetchlat_stamps_total[{RI}]))", "{{source}} {{instance}}"),
    ), unit="short", description="With --stamps kernel every read of a plain broker connection is stamped by "
                                 "the kernel; clock reads (TLS to the broker on the event loop's road) are late by the "
                                 "event-loop lag above."),
    Panel("Broker faults: connections held for an unreachable broker, failed connects, broker-side closes", (
        Q("sum by (instance) (fetchlat_connections_waiting_upstream)", "held {{instance}}"),
        Q(f"sum by (instance) (increase(fetchlat_upstream_connect_failures_total[{RI}]))",
          "failed connects {{instance}}"),
        Q(f"sum by (instance) (increase(fetchlat_upstream_disconnects_total[{RI}]))", "closed by broker {{instance}}"),
        Q(f"sum by (instance) (increase(fetchlat_upstream_hold_seconds_count[{RI}]))",
          "connections whose requests waited for the broker connection {{instance}}"),
    ), unit="short", description="While a broker restarts, client requests are held (bounded) for "
                                 "upstream_hold_timeout_s, then the client connection is closed so it reconnects."),
    Panel("Responses rewritten (broker addresses, ApiVersions caps)", (
        Q(f"sum by (api) (rate(fetchlat_rewritten_responses_total[{RI}]))", "{{api}}"),
    ), unit="reqps"),
    Panel("Decode errors (frames forwarded undecoded)", (
        Q(f"sum by (api) (rate(fetchlat_decode_errors_total[{RI}]))", "{{api}}"),
    ), unit="short"),
    Panel("Connections closed by the proxy, by reason", (
        Q(f"sum by (reason) (increase(fetchlat_connection_errors_total[{RI}]))", "{{reason}}"),
    ), unit="short"),
    Panel("Fetch sessions (KIP-227) mirrored, by event", (
        Q(f'sum by (event) (rate(fetchlat_fetch_sessions_total{{broker=~"$broker"}}[{RI}]))', "{{event}}"),
        Q('sum(fetchlat_fetch_sessions_mirrored{broker=~"$broker"})', "mirrored now"),
    ), unit="short", description="unknown or out_of_step > 0: incremental fetches whose whole partition set "
                                 "the proxy could not know (a session begun before the proxy started, or "
                                 "missed requests); errors: the broker evicted or refused a session."),
    Panel("Trace rows written / dropped", (
        Q(f"sum by (instance) (rate(fetchlat_trace_rows_written_total[{RI}]))", "written {{instance}}"),
        Q(f"sum by (instance) (rate(fetchlat_trace_rows_dropped_total[{RI}]))", "dropped {{instance}}"),
    ), unit="short", description="Dropped > 0: the trace disk is too slow or full; metrics are unaffected."),
    Panel("Proxy CPU and memory", (
        Q(f'rate(process_cpu_seconds_total{{job=~".*fetchlat.*"}}[{RI}])', "CPU s/s {{instance}}"),
        Q('process_resident_memory_bytes{job=~".*fetchlat.*"} / 2^30', "RSS GiB {{instance}}"),
    ), unit="short"),
    Panel("Client-leg RTT p99 (kernel TCP_INFO)", (
        Q(quantile(0.99, "fetchlat_client_rtt_seconds", "broker", 'broker=~"$broker"'), "{{broker}}"),
    )),
    Panel("Brokers known / listeners open", (
        Q("max by (instance) (fetchlat_brokers_known)", "brokers {{instance}}"),
        Q("max by (instance) (fetchlat_listeners)", "listeners {{instance}}"),
    ), unit="short", kind="stat"),
    Panel("Build of the hot path per proxy (compiled or python)", (
        Q("max by (instance, version, hot_path) (fetchlat_build_info)", "{{instance}} {{version}} {{hot_path}}"),
    ), unit="short", kind="stat", description="A proxy on the pure-Python hot path costs several times the CPU "
                                              "per request of the compiled one."),
]

DASHBOARDS = {
    "fetchlat-truth": ("fetchlat - fetch latency truth", TRUTH),
    "fetchlat-replication": ("fetchlat - replication", REPLICATION),
    "fetchlat-consumers": ("fetchlat - consumers", CONSUMERS),
    "fetchlat-proxy": ("fetchlat - proxy health", PROXY),
}


def variable(name: str, metric: str, label: str) -> dict[str, object]:
    return {
        "name": name, "label": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": f"label_values({metric}, {label})", "refId": f"var-{name}"},
        "definition": f"label_values({metric}, {label})", "refresh": 2, "includeAll": True, "multi": True,
        "allValue": ".*", "current": {"text": "All", "value": "$__all"}, "sort": 1,
    }


VARIABLES = [
    {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
     "current": {}, "refresh": 1},
    variable("broker", "fetchlat_fetches_total", "broker"),
    variable("kind", "fetchlat_fetches_total", "kind"),
    variable("topic", "fetchlat_record_latency_seconds_count", "topic"),
    variable("client", "fetchlat_client_fetches_total", "client"),
]


def panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, object]:
    custom: dict[str, object] = {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    if p.stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    out: dict[str, object] = {
        "id": pid, "type": p.kind, "title": p.title, "description": p.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": p.unit, "custom": custom if p.kind == "timeseries" else {}},
                        "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]}}
        if p.kind == "timeseries" else {"reduceOptions": {"calcs": ["lastNotNull"]}},
        "targets": [{"refId": chr(ord("A") + i), "expr": q.expr, "legendFormat": q.legend or "__auto",
                     "datasource": {"type": "prometheus", "uid": "${datasource}"},
                     **({"instant": True, "range": False} if p.kind in ("bargauge", "table") else {})}
                    for i, q in enumerate(p.queries)],
    }
    out.update(p.extra)
    return out


def dashboard(uid: str, title: str, panels: list[Panel]) -> dict[str, object]:
    placed, x, y = [], 0, 0
    for i, p in enumerate(panels, start=1):
        if x + p.width > 24:
            x, y = 0, y + 8
        placed.append(panel_json(p, i, x, y))
        x += p.width
    return {
        "uid": uid, "title": title, "tags": ["fetchlat", "kafka"], "timezone": "browser", "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": VARIABLES}, "annotations": {"list": []}, "links": [
            {"title": "fetchlat dashboards", "type": "dashboards", "tags": ["fetchlat"], "asDropdown": True}],
        "panels": placed,
    }


def prometheus_rule() -> str:
    import yaml

    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "fetchlat", "labels": {"app.kubernetes.io/name": "kafka"}},
           "spec": yaml.safe_load(RULES.read_text())}
    return ("# Prometheus Operator form of deploy/prometheus/alerts.yml, written by deploy/build.py: edit\n"
            "# alerts.yml, then run python deploy/build.py.\n" + yaml.safe_dump(doc, sort_keys=False, width=120))


def render() -> dict[Path, str]:
    out = {OUT / f"{uid}.json": json.dumps(dashboard(uid, title, panels), indent=2) + "\n"
           for uid, (title, panels) in DASHBOARDS.items()}
    out[PROMETHEUS_RULE] = prometheus_rule()
    return out


def main(argv: list[str]) -> int:
    files = render()
    if "--check" in argv:
        stale = [str(p.relative_to(HERE)) for p, text in files.items() if not p.exists() or p.read_text() != text]
        if stale:
            print(f"stale generated files: {', '.join(stale)}; run python deploy/build.py", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    print(f"wrote {len(files)} files: dashboards in {OUT}, {PROMETHEUS_RULE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

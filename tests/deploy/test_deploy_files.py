"""deploy/: the generated files are current, Prometheus accepts the config and rules (and the
rules fire on the shapes they are written for), every dashboard metric exists, and the
compose and Kubernetes topologies hold together -- checked structurally, since Docker and a
Kubernetes cluster cannot run here. Sidecar command lines go through the real CLI parser and
config loader."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from fetchlat.metrics.prom import FetchMetrics, ProxyMetrics
from fetchlat.proxy.cli import proxy_config
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))


def test_generated_files_are_current() -> None:
    r = subprocess.run([sys.executable, str(DEPLOY / "build.py"), "--check"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr


def promtool(*args: str, cwd: Path) -> None:
    if shutil.which("promtool") is None:
        pytest.fail("promtool (Debian 'prometheus') is not installed: run make test, it installs it")
    r = subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.integration
def test_promtool_accepts_config_and_rules_and_the_rules_fire_as_written(tmp_path: Path) -> None:
    promtool("check", "rules", "alerts.yml", cwd=DEPLOY / "prometheus")
    promtool("check", "config", "prometheus.yml", cwd=DEPLOY / "prometheus")
    # Debian's Prometheus is built without Kubernetes service discovery: check the k8s job's
    # relabelling with the discovery swapped for a static target
    k8s_job = yaml.safe_load((DEPLOY / "kubernetes" / "scrape-config.yaml").read_text())
    for job in k8s_job["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
        job["static_configs"] = [{"targets": ["pod:9464"]}]
    (tmp_path / "k8s.yml").write_text(yaml.safe_dump(k8s_job))
    promtool("check", "config", "k8s.yml", cwd=tmp_path)
    promtool("test", "rules", "alerts_test.yml", cwd=DEPLOY / "prometheus")


def sample_names() -> set[str]:
    reg = CollectorRegistry()
    ProxyMetrics(reg).learned.read = lambda: (300_000, 1_000_000)  # as a proxy's model, once it learned both
    FetchMetrics(reg)
    names = {"up", "process_cpu_seconds_total", "process_resident_memory_bytes"}
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    for fam in reg.collect():
        names.update(fam.name + s for s in suffixes[fam.type])
    return names


def exprs() -> list[tuple[str, str]]:
    out = []
    for f in DASHBOARDS:
        for p in json.loads(f.read_text())["panels"]:
            out += [(f"{f.stem} / {p['title']}", t["expr"]) for t in p["targets"]]
    for rule in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]:
        out.append((f"alert {rule['alert']}", rule["expr"]))
    return out


def test_every_metric_in_dashboards_and_alerts_is_exported() -> None:
    known = sample_names()
    used = {(where, m) for where, e in exprs() for m in re.findall(r"\b(?:fetchlat|process)_[a-z0-9_]+|\bup\b", e)}
    assert used
    assert not {(w, m) for w, m in used if m not in known}
    # and every fetchlat family is on some dashboard (a metric nobody can see is a bug too)
    families = {re.sub(r"(_total|_bucket|_sum|_count)$", "", n) for n in known if n.startswith("fetchlat_")}
    shown = {re.sub(r"(_total|_bucket|_sum|_count)$", "", m) for _, m in used}
    assert families - shown == set()


def test_dashboards_are_well_formed() -> None:
    assert {f.stem for f in DASHBOARDS} == {"fetchlat-truth", "fetchlat-replication", "fetchlat-consumers",
                                            "fetchlat-proxy"}
    for f in DASHBOARDS:
        d = json.loads(f.read_text())
        assert d["uid"] == f.stem
        variables = {v["name"] for v in d["templating"]["list"]}
        assert {"datasource", "broker", "kind", "topic", "client"} <= variables
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        for p in d["panels"]:
            g = p["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"]
            for t in p["targets"]:
                used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
                assert used <= variables, (p["title"], used)


# ------------------------------------------------------------------------- docker compose
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())  # type: ignore[no-any-return]


def listeners(text: str) -> dict[str, tuple[str, int]]:
    out = {}
    for item in text.split(","):
        name, _, addr = item.partition("://")
        host, _, port = addr.rpartition(":")
        out[name.strip()] = (host, int(port))
    return out


def test_compose_routes_clients_and_replication_through_the_sidecars() -> None:
    services = compose()["services"]
    brokers = {n: s for n, s in services.items() if s.get("image", "").startswith("apache/kafka") and
               "profiles" not in s}
    assert len(brokers) == 3
    targets = set()
    for name, broker in brokers.items():
        env = broker["environment"]
        node = int(env["KAFKA_NODE_ID"])
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
        inter = env["KAFKA_INTER_BROKER_LISTENER_NAME"]
        bound = listeners(env["KAFKA_LISTENERS"])[inter]
        advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
        assert set(advertised) == {inter}, "clients and followers use one listener: the sidecar's"
        assert bound[0] == "127.0.0.1", "the broker's data listener is reachable only through its sidecar"
        sidecars = [s for s in services.values() if s.get("network_mode") == f"service:{name}"]
        assert len(sidecars) == 1, f"{name} needs exactly one sidecar in its network namespace"
        cfg = proxy_config(sidecars[0]["command"], env={})
        assert cfg.sidecar_node == node
        assert cfg.upstreams == (bound,)
        assert advertised[inter] == (broker["hostname"], cfg.listen[1]), "the broker must advertise its sidecar"
        assert cfg.metrics_listen[0] == "0.0.0.0"
        assert cfg.trace_dir and any(v.endswith(":" + cfg.trace_dir) for v in sidecars[0]["volumes"])
        targets.add(f"{broker['hostname']}:{cfg.metrics_listen[1]}")
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert set(prom["scrape_configs"][0]["static_configs"][0]["targets"]) == targets
    # mounted config and provisioning exist in the repository
    for svc in ("prometheus", "grafana"):
        for vol in services[svc]["volumes"]:
            assert (DEPLOY / "docker" / vol.split(":")[0]).resolve().exists(), vol
    prov = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "fetchlat.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_dockerfile_is_slim_non_root_with_a_healthcheck() -> None:
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    # a build stage, then a slim runtime, both on a pinned Debian base (a point release's tag)
    assert re.search(r"^ARG BASE=debian:\d+\.\d+-slim$", text, re.M)
    assert text.count("FROM ${BASE}") == 2
    # the build stage has a Rust new enough for the native core, and refuses to be anything but the fast road
    assert "rustc-web cargo-web" in text and "assert h == 'native'" in text
    final = text.split("FROM ${BASE}")[2]
    assert "image-ca" not in final and "cargo" not in final and "gcc" not in final
    user = re.search(r"^USER (\S+)", text, re.M)
    assert user and user.group(1) not in ("root", "0")
    assert "/health/live" in re.search(r"^HEALTHCHECK.*(?:\n\s+.*)*", text, re.M).group(0)  # type: ignore[union-attr]
    assert 'ENTRYPOINT ["fetchlat", "proxy"]' in text
    copied = set()
    for src in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for path in src.split():
            if path == "build/image-ca/":
                continue  # made by make image: the host's extra certificate authorities, for the build stage
            assert (ROOT / path).exists(), f"Dockerfile copies {path}, which is not in the repository"
            copied.add(path)
    # the wheel is built from every package folder pyproject maps, and setup.py builds it
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert set(mapped.values()) | {"setup.py", "pyproject.toml"} <= copied


# ------------------------------------------------------------------------- kubernetes
def k8s() -> dict[str, dict[str, Any]]:
    docs = {}
    for f in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if d and "kind" in d:
                docs[f"{d['kind']}/{d['metadata']['name']}"] = d
    return docs


def test_kubernetes_pod_template_wires_the_sidecar(tmp_path: Path) -> None:
    docs = k8s()
    sts = docs["StatefulSet/kafka"]
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    kafka, side = containers["kafka"], containers["fetchlat"]
    kenv = {e["name"]: e for e in kafka["env"]}
    senv = {e["name"]: e for e in side["env"]}
    assert senv["FETCHLAT_SIDECAR_NODE"]["valueFrom"] == kenv["KAFKA_NODE_ID"]["valueFrom"]  # same node id
    ports = {p["name"]: p["containerPort"] for p in side["ports"]}
    assert side["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "metrics"}
    assert side["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "metrics"}
    assert {"requests", "limits"} <= side["resources"].keys()
    assert side["securityContext"]["runAsNonRoot"] is True
    # the config the sidecar would load, from the mounted ConfigMap
    mount = next(m for m in side["volumeMounts"] if m["name"] == "fetchlat-config")
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "fetchlat-config")
    cm = docs[f"ConfigMap/{vol['configMap']['name']}"]
    cfg_path = side["args"][side["args"].index("--config") + 1]
    assert cfg_path.startswith(mount["mountPath"] + "/")
    mounted = tmp_path / Path(cfg_path).name
    mounted.write_text(cm["data"][Path(cfg_path).name])
    cfg = proxy_config(["--config", str(mounted)], env={"FETCHLAT_SIDECAR_NODE": "0"})
    assert cfg.sidecar_node == 0
    assert cfg.listen[1] == ports["kafka"] and cfg.metrics_listen == ("0.0.0.0", ports["metrics"])
    assert pod["spec"]["terminationGracePeriodSeconds"] > cfg.drain_timeout_s
    inter = kenv["KAFKA_INTER_BROKER_LISTENER_NAME"]["value"]
    assert listeners(kenv["KAFKA_LISTENERS"]["value"])[inter] == cfg.upstreams[0]
    adv = listeners(kenv["KAFKA_ADVERTISED_LISTENERS"]["value"])
    assert set(adv) == {inter} and adv[inter][1] == cfg.listen[1], "the broker must advertise its sidecar"
    trace_mount = next(m for m in side["volumeMounts"] if m["name"] == "traces")
    assert cfg.trace_dir == trace_mount["mountPath"]
    # services and the PodMonitor find the pods and name ports that exist
    all_ports = {p["name"] for c in containers.values() for p in c.get("ports", [])}
    for name in ("Service/kafka", "Service/kafka-headless"):
        svc = docs[name]["spec"]
        assert svc["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in svc["ports"]} <= all_ports
    pm = docs["PodMonitor/fetchlat"]["spec"]
    assert pm["selector"]["matchLabels"].items() <= labels.items()
    assert pm["podMetricsEndpoints"][0]["port"] == "metrics" and pm["podMetricsEndpoints"][0]["path"] == "/metrics"
    rule = docs["PrometheusRule/fetchlat"]["spec"]
    assert rule == yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())


def test_every_exported_metric_is_documented() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    reg = CollectorRegistry()
    ProxyMetrics(reg)
    FetchMetrics(reg)
    for fam in reg.collect():
        name = fam.name + ("_total" if fam.type == "counter" else "")
        assert f"`{name}`" in text, f"{name} missing from docs/operations.md"


def test_the_deployments_run_the_kafka_the_project_is_tested_on_with_pinned_images() -> None:
    from fetchlat.embedded import kafka

    images = [s["image"] for s in compose()["services"].values()]
    for d in k8s().values():
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            images.append(c["image"])
    kafkas = [i for i in images if i.startswith("apache/kafka")]
    assert kafkas and set(kafkas) == {f"apache/kafka:{kafka.VERSION}"}
    for image in images:
        if image != "fetchlat:dev":  # built from deploy/docker/Dockerfile
            assert re.fullmatch(r"[\w./-]+:v?\d+(\.\d+)+", image), f"{image}: not pinned to a version"

"""Apache Kafka on this machine, from its own jars: fetched once through Maven into a cache
(``kafka-pom.xml`` names the version), formatted, started as a single KRaft node or as a
3-broker cluster with each broker behind its own fetchlat sidecar (``docs/deployment.md``'s
topology, on loopback), with the broker's request log on, and stopped by pid.

Owns: where the jars come from, every broker setting the tests, the demo and the benchmarks
run with, the request log's file and layout, the order of start and stop.
Must never: connect anywhere but 127.0.0.1, wait without a bound, or leave a process it started.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import proxy
from .proxy import ProxyProcess

POM = Path(__file__).with_name("kafka-pom.xml")
VERSION = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
READY_LINE = "Kafka Server started"
REQUEST_LOG = "request.log"  # beside server.log in each node's log directory
DEFAULT_HEAP = "384m"


class KafkaError(RuntimeError):
    """Kafka could not be fetched or started; the message says what happened and where the logs are."""


# ----------------------------------------------------------------------------------- jars
def cache_root() -> Path:
    return Path(os.environ.get("FETCHLAT_KAFKA_CACHE", Path.home() / ".cache" / "fetchlat"))


def libs_dir() -> Path:
    return cache_root() / f"kafka-{VERSION}" / "libs"


def ensure_jars(timeout_s: float = 900.0, quiet: bool = True) -> Path:
    """The directory of Kafka's jars, fetched through Maven the first time (then reused)."""
    libs = libs_dir()
    if (libs / ".complete").exists():
        return libs
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise KafkaError("Apache Kafka needs Java 17+ and Maven (mvn) on PATH to fetch and run its jars")
    tmp = libs.with_name(f"libs.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = ["mvn", "-B", *(["-q"] if quiet else []), "-f", str(POM), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise KafkaError(f"fetching Apache Kafka {VERSION} through Maven took over {timeout_s:.0f} s") from e
    if done.returncode != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
        raise KafkaError(f"fetching Apache Kafka {VERSION} through Maven failed:\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    (tmp / ".complete").write_text(VERSION + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    libs.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(libs)
    return libs


def java_command(main: str, *args: str, heap: str = DEFAULT_HEAP, log_config: Path | None = None,
                 logs_dir: Path | None = None) -> list[str]:
    """A JVM running one of Kafka's classes from the cached jars, with a bounded heap."""
    cmd = ["java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
    if log_config is not None:
        cmd.append(f"-Dlog4j2.configurationFile={log_config}")
    if logs_dir is not None:
        cmd.append(f"-Dkafka.logs.dir={logs_dir}")
    return [*cmd, "-cp", f"{ensure_jars()}/*", main, *args]


# ------------------------------------------------------------------------------ settings
LOG4J2 = """\
status = warn
appender.main.type = File
appender.main.name = MAIN
appender.main.fileName = ${sys:kafka.logs.dir}/server.log
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = [%d] %p %m (%c)%n
appender.req.type = File
appender.req.name = REQUESTS
appender.req.fileName = ${sys:kafka.logs.dir}/request.log
appender.req.immediateFlush = true
appender.req.layout.type = PatternLayout
appender.req.layout.pattern = %d{UNIX_MILLIS} %m%n
rootLogger.level = INFO
rootLogger.appenderRef.main.ref = MAIN
logger.req.name = kafka.request.logger
logger.req.level = ${sys:fetchlat.request.log.level:-DEBUG}
logger.req.additivity = false
logger.req.appenderRef.req.ref = REQUESTS
"""

# small and fast test brokers (what Kroxylicious, trivup and Kafka's test kit use)
COMMON = {
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "BROKER",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "num.partitions": "1",
    "metrics.jmx.exclude": ".*",
    "log.cleaner.dedupe.buffer.size": "2097152",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.replica.fetchers": "1",
    "auto.create.topics.enable": "false",
}


def replicated_internal_topics(rf: int) -> dict[str, str]:
    min_isr = str(min(rf, 2))
    return {
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": min_isr,
        "min.insync.replicas": min_isr,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    """One Kafka process: its settings, directories and, once started, its pid."""

    node_id: int
    roles: str  # "broker,controller" or "broker"
    port: int  # the broker listener, bound on loopback
    advertised_port: int  # its sidecar's port, or ``port`` itself without one
    controller_port: int | None
    home: Path
    settings: dict[str, str]
    heap: str = DEFAULT_HEAP
    format_args: tuple[str, ...] = ()  # more of StorageTool format's, e.g. ``--add-scram`` users
    proc: subprocess.Popen[bytes] | None = None
    log_from: int = 0  # where this run's server.log lines begin

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def request_log(self) -> Path:
        return self.logs_dir / REQUEST_LOG

    @property
    def server_log(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def write_config(self, voters: str) -> Path:
        listeners = [f"BROKER://127.0.0.1:{self.port}"]
        if self.controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        props = {
            "process.roles": self.roles, "node.id": str(self.node_id), "controller.quorum.voters": voters,
            "listeners": ",".join(listeners), "advertised.listeners": f"BROKER://127.0.0.1:{self.advertised_port}",
            "log.dirs": str(self.home / "data"), **COMMON, **self.settings,
        }
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        (self.home / "log4j2.properties").write_text(LOG4J2)
        path = self.home / "node.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def command(self, main: str, *args: str) -> list[str]:
        return java_command(main, *args, heap=self.heap, log_config=self.home / "log4j2.properties",
                            logs_dir=self.logs_dir)

    def format(self, cluster_id: str, timeout_s: float = 60.0) -> None:
        done = subprocess.run(self.command("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c",
                                           str(self.home / "node.properties"), *self.format_args),
                              capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise KafkaError(f"formatting node {self.node_id} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        out = open(self.logs_dir / "stdout.log", "ab")  # noqa: SIM115 - the JVM's stdout, closed with it
        self.proc = subprocess.Popen(self.command("kafka.Kafka", str(self.home / "node.properties")),
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()

    def started(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise KafkaError(f"Kafka node {self.node_id} exited with {self.proc.returncode}; logs in {self.logs_dir}")
        try:
            with self.server_log.open(errors="replace") as fh:
                fh.seek(self.log_from)  # a restarted node's log goes on after its earlier runs
                return READY_LINE in fh.read()
        except OSError:
            return False

    def restart(self, kill: bool = False, timeout_s: float = 60.0) -> None:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and start again on the same ports and data,
        back when it says it started."""
        self.stop(kill=kill)
        self.log_from = self.server_log.stat().st_size if self.server_log.exists() else 0
        self.start()
        wait_for(self.started, f"Kafka node {self.node_id} to restart (logs in {self.logs_dir})", timeout_s)

    def signal_stop(self, kill: bool = False) -> None:
        """SIGTERM (a controlled shutdown) or SIGKILL, without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)

    def stop(self, timeout_s: float = 20.0, kill: bool = False) -> None:
        self.signal_stop(kill)
        self.wait_stopped(timeout_s)

    def wait_stopped(self, timeout_s: float = 20.0) -> None:
        """Wait for the process to end; SIGKILL if it outlives the wait."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def wait_for(pred: object, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise KafkaError(f"timed out after {timeout_s:.0f} s waiting for {what}")


# ----------------------------------------------------------------------------- sidecars
def start_sidecar(node: Node, home: Path, extra: Sequence[str] = ()) -> ProxyProcess:
    """``fetchlat proxy --sidecar-node N`` in front of one broker, on the port the broker advertises."""
    return proxy.start(["--sidecar-node", str(node.node_id), "--upstream", node.bootstrap, *extra],
                       listen_port=node.advertised_port, metrics_port=free_port(),
                       log_path=home / f"sidecar-{node.node_id}.log")


# ------------------------------------------------------------------------------ clusters
@dataclass
class Cluster:
    """Nodes (and their sidecars, if any) started together; ``bootstrap`` is what clients use."""

    home: Path
    nodes: list[Node]
    sidecars: list[ProxyProcess] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        """The advertised addresses: the sidecars when there are, else the brokers themselves."""
        return ",".join(f"127.0.0.1:{n.advertised_port}" for n in self.nodes)

    @property
    def broker_ports(self) -> set[int]:
        return {n.port for n in self.nodes}

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def request_logs(self) -> list[Path]:
        return [n.request_log for n in self.nodes]

    def stop(self) -> None:
        """Pure brokers together (their controlled shutdown needs the controller, and their
        peers' sidecars to move leadership), then the controller, then the sidecars."""
        brokers = [n for n in self.nodes if "controller" not in n.roles]
        for n in brokers:
            n.signal_stop()
        for n in brokers:
            n.wait_stopped()
        for n in self.nodes:
            if n not in brokers:
                n.stop()
        for s in self.sidecars:
            s.stop()


def _plan(home: Path, brokers: int, sidecars: bool, settings: dict[str, str], heap: str,
          advertised_ports: Sequence[int] | None, racks: Sequence[str] | None = None,
          format_args: Sequence[str] = ()) -> list[Node]:
    controller_port = free_port()
    rf = min(brokers, 3)
    nodes = []
    for i in range(brokers):
        port = free_port()
        advertised = advertised_ports[i] if advertised_ports else free_port() if sidecars else port
        nodes.append(Node(
            node_id=i, roles="broker,controller" if i == 0 else "broker", port=port, advertised_port=advertised,
            controller_port=controller_port if i == 0 else None, home=home / f"node-{i}",
            settings={**replicated_internal_topics(rf), **settings, **({"broker.rack": racks[i]} if racks else {})},
            heap=heap, format_args=tuple(format_args)))
    return nodes


@contextmanager
def cluster(home: Path, *, brokers: int = 1, sidecars: bool = False, settings: dict[str, str] | None = None,
            sidecar_args: Sequence[str] = (), heap: str = DEFAULT_HEAP, start_timeout_s: float = 90.0,
            advertised_ports: Sequence[int] | None = None, racks: Sequence[str] | None = None,
            format_args: Sequence[str] = ()) -> Iterator[Cluster]:
    """A KRaft cluster on loopback: node 0 is broker and the one controller, the others brokers.
    With ``sidecars`` each broker advertises its own fetchlat sidecar, so every client request
    and every follower's replication fetch crosses one. ``advertised_ports`` makes each broker
    advertise a port of the caller's (a proxy the caller starts there, as the benchmark's
    haproxy and relay). ``racks`` gives each broker its ``broker.rack`` (KIP-392 fetch from
    follower needs them). ``format_args`` go to every node's ``StorageTool format`` (SCRAM users:
    ``--add-scram 'SCRAM-SHA-512=[name=U,password=P]'``). Stopped (sidecars first) on exit."""
    ensure_jars()
    home.mkdir(parents=True, exist_ok=True)
    nodes = _plan(home, brokers, sidecars, settings or {}, heap, advertised_ports, racks, format_args)
    voters = f"0@127.0.0.1:{nodes[0].controller_port}"
    # KRaft's form of a UUID; it may begin with "-", hence --cluster-id=<id> in format()
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    c = Cluster(home, nodes)
    try:
        for n in nodes:
            n.write_config(voters)
            n.format(cluster_id)
        for n in nodes:
            n.start()
        if sidecars:
            c.sidecars = [start_sidecar(n, home, sidecar_args) for n in nodes]
        for n in nodes:
            wait_for(n.started, f"Kafka node {n.node_id} to start (logs in {n.logs_dir})", start_timeout_s)
        for s in c.sidecars:
            s.wait_ready(30)
        yield c
    finally:
        c.stop()


def tool(main: str, *args: str, timeout_s: float = 120.0, heap: str = "256m",
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """One of Kafka's own tools (``org.apache.kafka.tools.ProducerPerformance``, the console
    clients, ...) run to completion with a bounded heap and time (log4j2's default: errors only)."""
    return subprocess.run(java_command(main, *args, heap=heap), input=stdin, capture_output=True, text=True,
                          timeout=timeout_s, check=False)

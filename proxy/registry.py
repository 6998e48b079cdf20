"""The brokers this proxy knows: learned from its own metadata requests and from every
response clients receive (Metadata, FindCoordinator, DescribeCluster, NodeEndpoints).

Owns: which node is where, and the ``broker`` label of a connection (the node id of the
address it forwards to; in sidecar mode always the fronted node). Pure: what learning a
broker *does* (bind a listener, check a sidecar's advertised address) is the caller's, told
through ``learn``'s result. Must never: do I/O, or log.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.events import BrokerAddress

HostPort = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Change:
    broker: BrokerAddress
    moved_from: BrokerAddress | None  # None: newly learned


class BrokerRegistry:
    def __init__(self, sidecar_node: int | None = None) -> None:
        self.sidecar_node = sidecar_node
        self.nodes: dict[int, BrokerAddress] = {}
        self.generation = 0  # bumped on every change: cached labels check it
        self._by_addr: dict[HostPort, str] = {}

    def knows(self, brokers: tuple[BrokerAddress, ...]) -> bool:
        """Every one of ``brokers`` is known at that address: ``learn`` would change nothing."""
        for b in brokers:
            old = self.nodes.get(b.node_id)
            if old is None or old.host != b.host or old.port != b.port:
                return False
        return True

    def learn(self, brokers: tuple[BrokerAddress, ...]) -> list[Change]:
        changes = []
        for b in brokers:
            old = self.nodes.get(b.node_id)
            if old is not None and (old.host, old.port) == (b.host, b.port):
                continue
            self.nodes[b.node_id] = b
            changes.append(Change(b, old))
        if changes:
            self.generation += 1
            self._by_addr = {(b.host, b.port): str(b.node_id) for b in self.nodes.values()}
        return changes

    def label(self, upstream: HostPort, default: str) -> str:
        """The ``broker`` label of a connection forwarding to ``upstream``."""
        if self.sidecar_node is not None:
            return str(self.sidecar_node)
        return self._by_addr.get(upstream, default)

    def node_at(self, upstream: HostPort) -> int | None:
        """The node at ``upstream`` (a proxy's bootstrap broker): a sidecar's own, else the one
        advertised there, or None: not known yet. An address spelled another way (a name for an
        IP) is matched by its port when one broker alone has that port."""
        if self.sidecar_node is not None:
            return self.sidecar_node  # its broker advertises the sidecar, not the address it listens on
        same_port = [b for b in self.nodes.values() if b.port == upstream[1]]
        exact = [b for b in same_port if b.host == upstream[0]]
        found = exact or (same_port if len(same_port) == 1 else [])
        return found[0].node_id if found else None

    def address(self, node_id: int) -> HostPort:
        b = self.nodes[node_id]
        return b.host, b.port

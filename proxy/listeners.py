"""The proxy's listening sockets: the bootstrap listener, and one listener per broker learned
(by default on ``listen_port + 1 + node_id``). A broker's listener is bound synchronously when
the broker is learned, before the response naming it reaches the client, so a client never
sees an address nobody listens on.

Owns: binding, and which node has a listener. Must never: decide routing (``registry.py``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from .config import Config, HostPort, format_hostport

log = logging.getLogger("fetchlat.proxy")


def bind_listener(addr: HostPort) -> socket.socket:
    host, port = addr
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(sockaddr)
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


ProtocolFactory = Callable[[], asyncio.Protocol]


class NodeListeners:
    """One listener per broker node (not in sidecar mode: every broker advertises its sidecar)."""

    def __init__(self, cfg: Config, factory: Callable[[int], ProtocolFactory], bind_failed: Callable[[], None]) -> None:
        self.cfg = cfg
        self.factory = factory  # node id -> protocol factory for its connections
        self.bind_failed = bind_failed
        self.sockets: dict[int, socket.socket] = {}
        self.servers: dict[int, asyncio.Server] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def ensure(self, node_id: int) -> None:
        if node_id in self.sockets:
            return
        addr = self.cfg.node_listen(node_id)
        if addr is None:
            return  # served by another sidecar
        try:
            sock = bind_listener(addr)
        except OSError as exc:
            log.error("cannot listen for broker %d on %s (%s): clients told to use it will fail; "
                      "set nodes.%d.listen in the config", node_id, format_hostport(addr), exc.strerror, node_id)
            self.bind_failed()
            return
        self.sockets[node_id] = sock

        async def serve() -> None:
            self.servers[node_id] = await asyncio.get_running_loop().create_server(self.factory(node_id), sock=sock)

        self.tasks.append(asyncio.get_running_loop().create_task(serve()))
        log.info("listening for broker %d on %s (advertised as %s)", node_id, format_hostport(addr),
                 format_hostport(self.cfg.node_advertise(node_id)))

    @property
    def all_serving(self) -> bool:
        return all(n in self.servers for n in self.sockets)

    def close(self) -> None:
        for srv in self.servers.values():
            srv.close()

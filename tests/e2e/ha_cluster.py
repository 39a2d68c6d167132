"""A pg_auto_failover formation of a test's or a bench's own on this machine: a monitor, a
primary and a synchronous standby, each a PostgreSQL cluster with its own data directory and
port, each run by its own ``pg_autoctl`` (Debian packages ``postgresql-15-auto-failover`` and
``pg-auto-failover-cli``), as docs/operations.md "High availability" sets one up on three
machines.

- ``AutoFailoverCluster.start``: the monitor (its failover timings tuned as the docs say),
  then two nodes; returns when one is ``primary`` and the other ``secondary`` (synchronous).
- ``url``: the broker's ``DATABASE_URL``: every node's address, ``target_session_attrs=
  read-write`` (libpq connects to whichever node is the primary).
- The faults of ``bench/chaos.py --failover``: ``lose_node`` (the node's ``pg_autoctl`` and
  PostgreSQL killed with SIGKILL, its data directory moved away: the machine is gone),
  ``replace_node`` (a new, empty machine on the lost one's address joins as a standby),
  ``switchover`` (planned), ``stop_monitor`` / ``start_monitor``.
- ``remove``: everything killed and deleted.

Run as root, every process runs as the system user ``postgres`` (PostgreSQL refuses root), as
``tests.e2e.services.PrivatePostgres`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.e2e.services import pg_bin, postgres_owner

DATABASE = "halfmoon"
States = dict[str, tuple[str, str]]
"""Each node's (reported state, assigned state) by name, as the monitor sees them."""

MONITOR_SETTINGS = {
    # The monitor probes each node every second (1 s timeout, one retry after 0.5 s) and
    # considers it unhealthy 3 s after its keeper last reported: defaults 5 s, 5 s, 2, 2 s, 20 s.
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    # Before the standby takes writes, the monitor waits this long for the old primary to have
    # demoted itself; it must exceed the keepers' network_partition_timeout (below). Default 30 s.
    "pgautofailover.primary_demote_timeout": "8000",
}
KEEPER_NETWORK_PARTITION_TIMEOUT_S = 5
"""A primary whose keeper reaches neither the monitor nor a standby for this long demotes
itself (default 20 s): below ``primary_demote_timeout``, so two primaries never take writes."""


def pg_autoctl() -> str | None:
    """The ``pg_autoctl`` command, or None when pg_auto_failover is not installed."""
    return shutil.which("pg_autoctl")


@dataclass
class Node:
    """One data node: its name in the formation, port and data directory."""

    name: str
    port: int
    pgdata: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class AutoFailoverCluster:
    """A monitor and two data nodes on 127.0.0.1 (module docstring)."""

    def __init__(self, monitor_port: int, node_ports: tuple[int, int]) -> None:
        bin_dir = pg_bin()
        assert bin_dir is not None, "PostgreSQL's server binaries are missing (Debian: postgresql)"
        assert pg_autoctl(), (
            "pg_autoctl is missing (Debian: apt-get install -y postgresql-15-auto-failover "
            "pg-auto-failover-cli)"
        )
        self.directory = Path(tempfile.mkdtemp(prefix="halfmoon-ha-"))
        self.monitor_port = monitor_port
        self.monitor_pgdata = self.directory / "monitor"
        self.monitor_process: subprocess.Popen[bytes] | None = None
        self.nodes: list[Node] = []
        self.lost_at: float | None = None
        """When (``time.monotonic()``) ``lose_node`` last killed a node."""
        self._ports = node_ports
        self._created = 0
        self._user = postgres_owner(self.directory)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PG_CONFIG": str(bin_dir / "pg_config"),
            # pg_autoctl keeps each node's configuration and state under XDG directories:
            # the cluster's own, never the postgres user's home.
            "XDG_CONFIG_HOME": str(self.directory / "config"),
            "XDG_DATA_HOME": str(self.directory / "data"),
            "XDG_RUNTIME_DIR": str(self.directory / "run"),
            "PGCONNECT_TIMEOUT": "2",
        }

    # --- addresses -----------------------------------------------------------------------

    @property
    def monitor_url(self) -> str:
        """The monitor's libpq URL (the nodes register there)."""
        return (
            f"postgresql://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover"
            "?sslmode=disable"
        )

    def url(self, database: str = DATABASE, scheme: str = "postgres") -> str:
        """The broker's ``DATABASE_URL``: both nodes' addresses (whichever is the primary),
        ``target_session_attrs=read-write``."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self._ports)
        return f"{scheme}://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def node_url(self, node: Node, database: str = DATABASE) -> str:
        """One node's own libpq URL."""
        return f"postgresql://postgres@127.0.0.1:{node.port}/{database}?connect_timeout=2"

    # --- running pg_autoctl -----------------------------------------------------------------

    def _autoctl(self, *args: str, timeout_s: float = 120) -> str:
        done = subprocess.run(
            [*self._user, "pg_autoctl", *args], env=self.env, capture_output=True, text=True,
            timeout=timeout_s, cwd="/tmp",
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    def _spawn(self, log: Path, *args: str) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                [*self._user, "pg_autoctl", *args], env=self.env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, cwd="/tmp",
            )  # fmt: skip

    def states(self) -> States:
        """Each node's (reported state, assigned state), as the monitor sees them."""
        shown = json.loads(
            self._autoctl("show", "state", "--monitor", self.monitor_url, "--json", timeout_s=30)
        )
        return {
            node["nodename"]: (node["current_group_state"], node["assigned_group_state"])
            for node in shown
        }

    # --- the formation ----------------------------------------------------------------------

    def start(self, timeout_s: float = 240) -> None:
        """The monitor, then two nodes; returns once they are primary and secondary.

        Raises:
            RuntimeError: a step failed or the formation did not settle within ``timeout_s``.
        """
        self._autoctl(
            "create", "monitor", "--pgdata", str(self.monitor_pgdata), "--pgport",
            str(self.monitor_port), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl",
        )  # fmt: skip
        self.start_monitor()
        admin = f"postgresql://postgres@127.0.0.1:{self.monitor_port}/pg_auto_failover"
        with psycopg.connect(admin, autocommit=True) as conn:
            for name, value in MONITOR_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
        first = self._add_node(self._ports[0])
        self.wait_for(
            lambda s: s.get(first.name, ("",))[0] in ("single", "wait_primary"), timeout_s
        )
        second = self._add_node(self._ports[1])
        self.wait_settled(timeout_s)
        self._tune_keepers([first, second])

    def start_monitor(self, timeout_s: float = 60) -> None:
        """Run the monitor's ``pg_autoctl`` (again, after ``stop_monitor``)."""
        self.monitor_process = self._spawn(
            self.directory / "monitor.log", "run", "--pgdata", str(self.monitor_pgdata)
        )
        deadline = time.monotonic() + timeout_s
        while True:
            with suppress(psycopg.Error):
                psycopg.connect(self.monitor_url, connect_timeout=2).close()
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the monitor did not start: {self.directory / 'monitor.log'}")
            time.sleep(0.2)

    def stop_monitor(self) -> None:
        """The monitor's machine lost: its ``pg_autoctl`` and PostgreSQL killed with SIGKILL."""
        _kill_group(self.monitor_process)
        self.monitor_process = None

    def _add_node(self, port: int) -> Node:
        self._created += 1
        node = Node(f"node{self._created}", port, self.directory / f"node{self._created}")
        node.process = self._spawn(
            self.directory / f"{node.name}.log",
            "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(port),
            "--hostname", "127.0.0.1", "--name", node.name, "--auth", "trust", "--no-ssl",
            "--monitor", self.monitor_url, "--dbname", DATABASE, "--run",
        )  # fmt: skip
        self.nodes.append(node)
        return node

    def _tune_keepers(self, nodes: list[Node]) -> None:
        """``nodes``' keepers' network partition timeout (``KEEPER_NETWORK_PARTITION_TIMEOUT_S``),
        set once they run: a keeper reloads its configuration on SIGHUP, which would interrupt
        a node's ``initdb`` or base backup."""
        for node in nodes:
            self._autoctl(
                "config", "set", "--pgdata", str(node.pgdata),
                "timeout.network_partition_timeout", str(KEEPER_NETWORK_PARTITION_TIMEOUT_S),
            )  # fmt: skip

    def wait_for(self, predicate: Callable[[States], bool], timeout_s: float) -> States:
        """Poll the monitor's states until ``predicate(states)``; returns them.

        Raises:
            RuntimeError: not within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        states: States = {}
        while True:
            with suppress(RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired):
                states = self.states()
                if predicate(states):
                    return states
            if time.monotonic() > deadline:
                raise RuntimeError(f"the formation did not settle: {states}; see {self.directory}")
            # A standby's pg_basebackup waits for a checkpoint of the primary, by default a
            # spread one (minutes): ask the primary for an immediate one.
            primary = self.primary(states)
            joining = any(s[0] in ("wait_standby", "catchingup") for s in states.values())
            if primary is not None and joining:
                with (
                    suppress(psycopg.Error),
                    psycopg.connect(self.node_url(primary), autocommit=True) as conn,
                ):
                    conn.execute("CHECKPOINT")
            time.sleep(0.5)

    def wait_settled(self, timeout_s: float = 240) -> None:
        """Until one node is ``primary`` and another ``secondary``, both as assigned."""

        def settled(states: States) -> bool:
            reported = sorted(r for r, a in states.values() if r == a)
            return reported == ["primary", "secondary"]

        self.wait_for(settled, timeout_s)

    def primary(self, states: States | None = None) -> Node | None:
        """The node the monitor reports as taking writes (primary, wait_primary, single)."""
        with suppress(RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired):
            states = states if states is not None else self.states()
            for node in self.nodes:
                if states.get(node.name, ("",))[0] in ("primary", "wait_primary", "single"):
                    return node
        return None

    def standby(self) -> Node | None:
        """The node the monitor reports as ``secondary``."""
        states = self.states()
        return next((n for n in self.nodes if states.get(n.name, ("",))[0] == "secondary"), None)

    def lose_node(self, node: Node) -> None:
        """The node's machine lost: its ``pg_autoctl`` and PostgreSQL killed with SIGKILL, its
        data directory moved away (nothing restarts it)."""
        self.lost_at = time.monotonic()
        _kill_group(node.process)
        node.process = None
        if node.pgdata.exists():
            node.pgdata.rename(node.pgdata.with_name(node.pgdata.name + ".lost"))

    def replace_node(self, node: Node, timeout_s: float = 240) -> Node:
        """A lost node replaced: dropped from the monitor, then a new, empty node on its port
        joins and catches up as the synchronous standby. Returns the new node.

        Raises:
            RuntimeError: the formation did not settle within ``timeout_s``.
        """
        self._autoctl(
            "drop", "node", "--monitor", self.monitor_url, "--name", node.name, "--force",
        )  # fmt: skip
        self.nodes.remove(node)
        shutil.rmtree(node.pgdata.with_name(node.pgdata.name + ".lost"), ignore_errors=True)
        shutil.rmtree(node.pgdata, ignore_errors=True)
        fresh = self._add_node(node.port)
        self.wait_settled(timeout_s)
        self._tune_keepers([fresh])
        return fresh

    def switchover(self, timeout_s: float = 120) -> None:
        """A planned switchover (``pg_autoctl perform switchover``): the standby becomes the
        primary, the primary its standby."""
        primary = self.primary()
        assert primary is not None, "no primary to switch over from"
        self._autoctl("perform", "switchover", "--pgdata", str(primary.pgdata), timeout_s=timeout_s)
        self.wait_settled(timeout_s)

    def remove(self) -> None:
        """Kill every process of the formation and delete its directory."""
        for node in self.nodes:
            _kill_group(node.process)
        _kill_group(self.monitor_process)
        shutil.rmtree(self.directory, ignore_errors=True)


def _kill_group(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL a ``pg_autoctl`` and everything it started (its process group: PostgreSQL, its
    backends)."""
    if process is None:
        return
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)

"""The fake cluster's pod network: a network namespace holding a bridge (the "node"), and for
every pod a network namespace of its own joined to the bridge by a veth pair, with an address of
the pod subnet. Pods reach each other, and the cluster DNS on the bridge's address, by IP;
nothing is routed off the machine, and the host's own network is never touched.

Every namespace is named ``pck8s-<pid>-…`` after the process that made it: ``sweep_stale``
removes those of processes that died without cleaning up (a killed test run)."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import os
import re
import subprocess
import threading

PREFIX = "pck8s"
SUBNET = ipaddress.ip_network("10.244.0.0/16")
NETNS_DIR = "/run/netns"
BRIDGE_MAC = "02:00:0a:f4:00:01"  # locally administered; each cluster's bridge is its own LAN
_CLONE_NEWNET = 0x40000000


class NetworkError(RuntimeError):
    """A namespace or link could not be made: the message has ``ip``'s own words."""


def _ip(*args: str, batch: list[str] | None = None) -> None:
    command = ["ip", *args] if batch is None else ["ip", *args, "-batch", "-"]
    result = subprocess.run(command, input="\n".join(batch or []) + "\n", text=True,
                            capture_output=True, check=False)
    if result.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {result.stderr.strip()}")


def enter_netns(path: str) -> None:
    """Move the calling thread (only it: the rest of the process stays put) into the network
    namespace at ``path``; sockets it makes from then on are that namespace's."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def _namespaces() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_owner(name: str) -> bool:
    """Whether ``name`` (a namespace, a cgroup…) belongs to a fake cluster whose process is
    gone."""
    match = re.fullmatch(rf"{PREFIX}-(\d+)-.*", name)
    return bool(match) and not _alive(int(match.group(1)))


@contextlib.contextmanager
def sweeping():
    """Held while leftovers of dead clusters are swept, and while a test plants such leftovers:
    ``ip netns add`` makes the namespace's file before it mounts the namespace on it, and a sweep
    in another test process between the two makes the add fail. The lock is ``/run`` itself
    (``/run/netns`` may not exist yet, and a lock file would outlive the tests)."""
    fd = os.open("/run", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and with it the lock


def sweep_stale() -> list[str]:
    """Remove the namespaces left by fake clusters whose process is gone; their names."""
    removed = []
    with sweeping():
        for name in _namespaces():
            if dead_owner(name):
                subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
                removed.append(name)
    return removed


class ClusterNetwork:
    """One fake cluster's pod network. ``add_pod`` gives a pod its namespace and address,
    ``remove_pod`` takes them back; ``close`` removes everything this network made."""

    _instances = iter(range(1, 1 << 30))
    _instances_lock = threading.Lock()

    def __init__(self):
        with self._instances_lock:
            number = next(self._instances)
        self.tag = f"{PREFIX}-{os.getpid()}-{number}"
        self.node_ns = f"{self.tag}-node"
        hosts = SUBNET.hosts()
        self.gateway = str(next(hosts))  # the bridge: where the cluster DNS answers
        self._free = hosts  # addresses never given out yet
        self._released: list[str] = []
        self._pods: dict[str, tuple[str, str, int]] = {}  # uid -> (netns, ip, link number)
        self._links = iter(range(1, 1 << 30))
        self._lock = threading.Lock()
        self._open = False

    def open(self) -> ClusterNetwork:
        sweep_stale()
        _ip("netns", "add", self.node_ns)
        self._open = True
        _ip("-n", self.node_ns, batch=[
            # A MAC of its own: a bridge without one takes its ports' lowest, and changes it
            # when that pod goes, which the other pods' neighbour caches learn only after
            # 30 s or more (their DNS questions go unanswered meanwhile).
            f"link add br0 address {BRIDGE_MAC} type bridge",
            f"addr add {self.gateway}/{SUBNET.prefixlen} dev br0",
            "link set br0 up",
            "link set lo up",
        ])
        return self

    @property
    def node_netns_path(self) -> str:
        return os.path.join(NETNS_DIR, self.node_ns)

    def netns_path(self, uid: str) -> str:
        return os.path.join(NETNS_DIR, self._pods[uid][0])

    def add_pod(self, uid: str) -> str:
        """A network namespace for the pod with ``uid``, on the bridge; its IP."""
        with self._lock:
            if uid in self._pods:
                return self._pods[uid][1]
            fresh = next(self._free, None)
            if fresh is None and not self._released:
                raise NetworkError(f"no address of {SUBNET} is left for a pod")
            ip = str(fresh) if fresh is not None else self._released.pop(0)
            link = next(self._links)
            netns = f"{self.tag}-p{link}"
            self._pods[uid] = (netns, ip, link)
        _ip("netns", "add", netns)
        _ip("-n", self.node_ns, batch=[
            f"link add v{link} type veth peer name eth0 netns {netns}",
            f"link set v{link} master br0 up",
        ])
        _ip("-n", netns, batch=[
            f"addr add {ip}/{SUBNET.prefixlen} dev eth0",
            "link set eth0 up",
            "link set lo up",
            f"route add default via {self.gateway}",
        ])
        return ip

    def remove_pod(self, uid: str) -> None:
        """Delete the pod's namespace (its veth goes with it); its IP may be given again, after
        every address never used (as a real IPAM, which avoids reusing an IP at once)."""
        with self._lock:
            entry = self._pods.pop(uid, None)
        if entry is None:
            return
        netns, ip, _ = entry
        subprocess.run(["ip", "netns", "delete", netns], capture_output=True, check=False)
        with self._lock:
            self._released.append(ip)

    def close(self) -> None:
        for uid in list(self._pods):
            self.remove_pod(uid)
        if self._open:
            subprocess.run(["ip", "netns", "delete", self.node_ns], capture_output=True,
                           check=False)
            self._open = False

    def namespaces(self) -> list[str]:
        """This network's namespaces that exist now (for tests of the harness itself)."""
        return [name for name in _namespaces() if name.startswith(self.tag + "-")]

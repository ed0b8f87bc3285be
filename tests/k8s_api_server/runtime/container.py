"""One container as a process tree on this machine: ``nsenter`` joins the pod's network
namespace, ``bwrap`` (bubblewrap) builds the container's filesystem in a private mount
namespace and runs the command as PID 1 of a PID namespace of its own (so, as in a container,
a PID 1 without a handler ignores SIGTERM, and everything it started dies with it), and
``setpriv`` takes the pod's user and groups. A memory cgroup, where the machine lets us make
one, enforces the memory limit and tells an OOM kill from any other SIGKILL.

The filesystem is this machine's, read-only (images are not pulled; ``$HOME`` too), with a
writable ``/tmp``, the kubelet's ``/etc/hosts``, ``/etc/resolv.conf`` and ``/etc/hostname``, and
the pod's volumes at their ``mountPath``s. Directories that mount paths need are made on a
fresh tmpfs root: nothing is created on the host's own filesystem."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# Host directories a container never sees as they are on the host.
_OWN = {"proc", "dev", "sys", "tmp", "run", "lost+found"}
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")
CGROUP_PARENT = "paddlecloud-fake"  # where the containers' cgroups are, in MEMORY_CGROUP
TOOLS = {tool: shutil.which(tool) or tool for tool in ("nsenter", "bwrap", "setpriv")}


@dataclass(frozen=True)
class Mount:
    source: str  # a path on this machine
    target: str  # where the container sees it
    read_only: bool = False


@dataclass
class ContainerSpec:
    """Everything needed to start one run of a container."""

    name: str  # used for the cgroup's name, with the pod's uid
    argv: list[str]
    env: dict[str, str]
    netns_path: str
    hostname: str
    working_dir: str | None
    mounts: list[Mount]
    etc_files: dict[str, str]  # /etc/hosts etc. -> their source files
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    no_new_privs: bool = False
    memory_limit: int | None = None  # bytes
    extra: dict = field(default_factory=dict)


def _covers(path: str, targets: list[str]) -> bool:
    return any(t == path or t.startswith(path + "/") for t in targets)


def _root_args(host_dir: str, targets: list[str]) -> list[str]:
    """bwrap arguments that show ``host_dir``'s entries read-only, except those on the way to
    a mount target, which become tmpfs directories (recursively) so the target can be made."""
    args: list[str] = []
    for entry in sorted(os.listdir(host_dir)):
        path = os.path.join(host_dir, entry)
        if host_dir == "/" and entry in _OWN:
            continue
        if path in targets:
            continue  # the mount itself takes this place
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif _covers(path, targets) and os.path.isdir(path):
            args += ["--perms", "0755", "--dir", path, *_root_args(path, targets)]
        elif os.path.isdir(path) or os.path.isfile(path):
            args += ["--ro-bind", path, path]
    return args


def _hidden_prefixes() -> list[str]:
    """The Python this harness runs with and what it imports (a virtualenv, and the checkout
    an editable install points into, under /tmp say), where a directory the container has its
    own of (``_OWN``) would hide them: they are part of the image the pods run (``python`` on
    their PATH, and the packages it finds)."""
    roots = [sys.prefix, sys.base_prefix, *(p for p in sys.path if p)]
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and "." not in name.strip("."):  # a top-level module: its root is its dir
            path = Path(file)
            roots.append(str(path.parents[1] if path.name == "__init__.py" else path.parent))
    hidden = sorted({os.path.abspath(root) for root in roots
                     if root.strip("/").split("/")[0] in _OWN and os.path.isdir(root)})
    return [root for root in hidden  # the outermost of nested ones
            if not any(root.startswith(other + "/") for other in hidden)]


def _closed_prefixes() -> list[str]:
    """The Python this harness runs with, where a directory on the way to it is closed to
    other users (pyenv's, under /root): the container's own directories on that way are
    opened (0755), so that a container of any uid runs the "image"'s ``python``."""
    closed = []
    for root in {os.path.abspath(sys.prefix), os.path.abspath(sys.base_prefix)}:
        if root.strip("/").split("/")[0] not in _OWN and any(
                not os.stat(parent).st_mode & 0o001 for parent in Path(root).parents):
            closed.append(root)
    return sorted(closed)


def bwrap_argv(spec: ContainerSpec, cgroup: Cgroup | None, info_fd: int) -> list[str]:
    targets = [m.target.rstrip("/") or "/" for m in spec.mounts]
    if spec.working_dir:
        targets.append(spec.working_dir.rstrip("/"))
    closed = [p for p in _closed_prefixes() if not _covers(p, targets)]
    args = cgroup.enter_argv() if cgroup is not None else []
    args += [TOOLS["nsenter"], f"--net={spec.netns_path}", "--",
            TOOLS["bwrap"], "--die-with-parent", "--unshare-pid", "--as-pid-1", "--unshare-ipc",
            "--unshare-uts", "--hostname", spec.hostname, "--info-fd", str(info_fd)]
    args += _root_args("/", targets + closed)
    for prefix in closed:
        args += ["--ro-bind", prefix, prefix]
    args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys",
             "--perms", "1777", "--tmpfs", "/tmp", "--perms", "0755", "--tmpfs", "/run"]
    made = set()
    for prefix in _hidden_prefixes():  # the "image"'s Python, where its own /tmp would hide it
        parts = prefix.strip("/").split("/")[:-1]
        for depth in range(2, len(parts) + 1):
            parent = "/" + "/".join(parts[:depth])
            if parent not in made:
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += ["--ro-bind", prefix, prefix]
    for target in targets:  # the directories on the way to each mount (bwrap makes 0700 ones)
        parts = target.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:depth])
            if parent not in made and not os.path.lexists(parent):
                args += ["--perms", "0755", "--dir", parent]
            made.add(parent)
    for target, source in sorted(spec.etc_files.items()):
        args += ["--ro-bind", source, target]
    for mount in sorted(spec.mounts, key=lambda m: m.target.count("/")):
        args += ["--ro-bind" if mount.read_only else "--bind", mount.source, mount.target]
    if spec.working_dir:
        if not any(m.target.rstrip("/") == spec.working_dir.rstrip("/") for m in spec.mounts):
            args += ["--perms", "0755", "--dir", spec.working_dir]
        args += ["--chdir", spec.working_dir]
    args.append("--")
    if spec.uid is not None or spec.gid is not None or spec.groups or spec.no_new_privs:
        args += [TOOLS["setpriv"], f"--reuid={spec.uid or 0}", f"--regid={spec.gid or 0}"]
        args += [f"--groups={','.join(map(str, spec.groups))}"] if spec.groups \
            else ["--clear-groups"]
        if spec.no_new_privs:
            args.append("--no-new-privs")
        args.append("--")
    return args + spec.argv


class Cgroup:
    """A v1 memory cgroup for one container run, holding ``memory_limit`` bytes."""

    def __init__(self, name: str, memory_limit: int | None):
        self.path = MEMORY_CGROUP / CGROUP_PARENT / name
        self.path.mkdir(parents=True, exist_ok=True)
        if memory_limit:
            (self.path / "memory.limit_in_bytes").write_text(str(memory_limit))

    @classmethod
    def available(cls) -> bool:
        return os.access(MEMORY_CGROUP, os.W_OK)

    def enter_argv(self) -> list[str]:
        """A prefix that moves the container (bwrap, and so all it starts) into this cgroup
        before it runs."""
        return ["/bin/sh", "-c", 'echo $$ >"$0/cgroup.procs" && exec "$@"', str(self.path)]

    def oom_killed(self) -> bool:
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value) > 0
        return False

    def remove(self) -> None:
        _remove_cgroup(self.path)


def _remove_cgroup(path: Path) -> bool:
    """Kill what is left in the cgroup and remove it (a cgroup whose last process is still
    exiting is busy for a moment); False if it is still there."""
    for _ in range(100):
        try:
            pids = (path / "cgroup.procs").read_text().split()
        except FileNotFoundError:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.01)
    return False


def sweep_cgroups(doomed) -> None:
    """Remove the container cgroups whose names ``doomed(name)`` (a stopping cluster's, or
    those of a cluster whose process died), and the parent cgroup once empty."""
    parent = MEMORY_CGROUP / CGROUP_PARENT
    if not parent.is_dir():
        return
    for child in parent.iterdir():
        if child.is_dir() and doomed(child.name):
            _remove_cgroup(child)
    with contextlib.suppress(OSError):  # another cluster's containers still have theirs
        parent.rmdir()


class Container:
    """A started container run: ``pid`` is its PID 1 (on the host), ``poll()`` its exit code
    once it has ended, ``signal()`` sends to PID 1, ``output`` is stdout and stderr."""

    def __init__(self, spec: ContainerSpec, cgroup_name: str):
        self.spec = spec
        self.cgroup = Cgroup(cgroup_name, spec.memory_limit) if Cgroup.available() else None
        info_read, info_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                bwrap_argv(spec, self.cgroup, info_write), env=spec.env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(info_write,), start_new_session=True)
        finally:
            os.close(info_write)
        with os.fdopen(info_read) as info:  # bwrap closes it once the container runs
            text = info.read()
        self.pid = json.loads(text)["child-pid"] if text.strip() else None
        self.output = self.process.stdout

    def poll(self) -> int | None:
        return self.process.poll()

    def signal(self, number: int) -> None:
        if self.pid is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, number)

    def oom_killed(self) -> bool:
        return self.cgroup is not None and self.cgroup.oom_killed()

    def cleanup(self) -> None:
        """Kill whatever is left and wait for it (a container that is gone has no process)."""
        if self.process.poll() is None:
            self.signal(signal.SIGKILL)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.cgroup is not None:
            self.cgroup.remove()

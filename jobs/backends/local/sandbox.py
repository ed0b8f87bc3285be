"""Sandboxes for the local backend's replicas, made with bubblewrap (``bwrap``, Debian's
``bubblewrap``). Standard library only.

What a sandboxed process sees (``sandbox_command``):

- the system, read-only: ``/usr``, the usrmerge links (or directories) ``/bin``, ``/lib``…, and
  the short list of world-readable ``/etc`` entries in ``ETC`` — never all of ``/etc``: the
  portal runs as root, and inside a user namespace mapped to root the owner bits of root's files
  still apply (``/etc/shadow`` would be readable);
- the portal's Python, read-only (``sys.base_prefix``, ``sys.prefix``, and the directories of
  the client packages trainers import — ``paddlecloud_sdk`` and what it imports: the
  Django-free ``paddlecloud_core`` (whose runner starts every replica) and
  ``paddlecloud_client``: ``client_dirs``);
- its own ``/proc`` (its own pid namespace: only its own processes), a minimal ``/dev``, a
  private ``/tmp``, and an ``/etc/hosts`` of its own, where its hostname is 127.0.0.1 (gloo,
  paddle.distributed's, looks its hostname up); the rest of its root is a tmpfs of its own;
- the caller's binds, each at its own host path, so that the paths in its environment hold;
- nothing else: no ``var/``, no other home, no ``/root``, no source tree.

Whom it runs as on the host is never root:

- A portal that is not root: as uid and gid 65534 (nobody, in every passwd) in a user
  namespace of its own, mapped to the portal's uid outside, unable to make further user
  namespaces (bubblewrap 0.8 or later).
- A portal that is root: mapped to root, a sandbox's process would be host root to the kernel
  wherever the kernel checks the uid rather than a capability — ``/proc/sys`` (a write to
  ``kernel/core_pattern`` runs a program of the job's choosing as root), files left set-uid
  root in a home. So bwrap runs as root without a user namespace, keeping only the
  capabilities to change ids, makes the sandbox as root (every bind is reachable, ``/root``
  too), and the command then runs as ``Sandbox.ids``, an unprivileged host uid and gid (its
  owner's own: ``jobs.backends.local``; nobody when none is given), with no capability and
  ``no_new_privs`` (``setpriv``).

Either way: no capabilities, ``/proc`` its own and read-only (``/proc/sys`` too), no ``/sys``,
every bind ``nosuid`` and ``nodev`` (bubblewrap's own), its own ipc, uts (its hostname) and
cgroup namespaces, and exactly the environment variables given.

Its network (``Sandbox.network``): ``"none"``, a namespace of its own with only ``lo``;
``"host"``, the machine's (for ``pip download``, which needs PyPI — it reaches 127.0.0.1 too,
so PostgreSQL and Redis: never for a job's own code); or a job's ``Netns``, one namespace per
job held by a small process (``jobs.backends.netns``), so that the replicas of a job reach
each other on 127.0.0.1 and nothing on the host's loopback (PostgreSQL, Redis, the portal). A
job with a master (a dataset) has one way out: its relay (``relay.py``), on 127.0.0.1:80 in the
job's network, forwards to the portal, and ends with the holder.

How it behaves as a process (bubblewrap 0.8.0; ``tests/jobs/test_sandbox.py`` holds each point):

- bwrap stays in the caller's process group (no ``--new-session``: the runner has no
  controlling terminal, so there is none to inject input into). In the sandbox bwrap's own
  pid 1 starts the command as pid 2, still in that group: a signal to the group reaches it.
- The command's exit status comes back as its own; a death by signal as 128 + the signal
  (137 SIGKILL, 143 SIGTERM), as a shell reports it. bwrap exits 1 when it cannot set the
  sandbox up (saying why on stderr); ``SETUP_FAILED`` (125) that its own setup inside failed
  (not in the job's network, or no ``/etc/hosts``), and the command was not run.
- A SIGTERM would kill bwrap's outer process (default action), and ``--die-with-parent`` would
  then SIGKILL the sandbox: no graceful shutdown. So bwrap starts with SIGTERM and SIGINT
  ignored (``env --ignore-signal``) and the command with them back at their defaults (``env
  --default-signal``: an ignored signal is inherited across exec, and a shell cannot even trap
  a signal it was started with ignored). bwrap's pid 1 ignores them anyway (a namespace's
  init gets only the signals it handles, SIGKILL aside).
- ``--die-with-parent``: when the command exits, the outer bwrap exits at once with its status
  and the kernel kills its pid 1, and with it everything left in the pid namespace — also what
  left the process group with ``setsid``. Without it pid 1 would wait for those, and the outer
  bwrap would be the only one to exit. It also ends the sandbox if the runner is killed.
- The environment is given as bwrap arguments (``--clearenv``, ``--setenv``) that bwrap reads
  from its stdin (``--args 0``), never on its command line — any user of the host can read
  every process's with ``ps``, and the environment holds secrets (a job master's token) — nor
  through the environment of the processes outside the sandbox: ``LD_PRELOAD`` or
  ``PYTHONPATH`` there would act outside it, as root. ``sandbox_command`` gives the command
  line and those arguments apart (``SandboxCommand``); the caller feeds them from memory (a
  memfd: ``SandboxCommand.stdin``, or the runner's ``--stdin-fd``), never from a file.
  bwrap reads them to their end and closes its stdin; the command gets ``/dev/null`` there,
  as it would outside.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud_core.processes import memory_fd, start_of

from ..netns import Netns, SandboxError, netns_alive, netns_start, netns_stop

# The host ids of a sandbox's process when the portal runs as root and none are given.
NOBODY = (65534, 65534)

SANDBOX_UID = SANDBOX_GID = 65534  # nobody / nogroup
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What programs read in /etc; each is bound only if the world may read it.
ETC = ("alternatives", "debian_version", "gai.conf", "group", "host.conf",
       "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "mime.types", "networks",
       "nsswitch.conf", "os-release", "passwd", "protocols", "resolv.conf", "services",
       "ssl/certs", "ssl/openssl.cnf", "timezone")
PRIVATE_TMP = "/tmp"  # noqa: S108 - a tmpfs of the sandbox's own
PRIVATE_SHM = "/dev/shm"  # noqa: S108 - the same
HOSTNAME_MAX = 64
HOSTNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
SETUP_FAILED = 125


@dataclass(frozen=True)
class Bind:
    """A host path seen in the sandbox, at ``dst`` (its own path when None). ``src`` must not
    be a link, and nothing may be bound inside a writable bind."""

    src: str
    dst: str | None = None
    writable: bool = False

    def __post_init__(self):
        object.__setattr__(self, "src", os.fspath(self.src))
        if self.dst is not None:
            object.__setattr__(self, "dst", os.fspath(self.dst))

    @property
    def target(self) -> str:
        return self.dst or self.src


@dataclass(frozen=True)
class Sandbox:
    """What one sandboxed process sees besides the system: ``binds``, exactly the variables
    of ``env`` (and PWD, which bwrap sets to ``cwd``), ``cwd``, its ``network`` (``"none"``,
    ``"host"`` or a job's ``Netns``) and its ``hostname`` (cut to 64 characters; its
    ``/etc/hosts`` gives it 127.0.0.1, as gloo needs), and ``ids``: the host uid and gid it
    runs as when the portal is root (never root; ``NOBODY`` when None). Its repr leaves ``env``
    out: it holds secrets."""

    binds: Sequence[Bind] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str = "/"
    network: str | Netns = "none"
    hostname: str = "sandbox"
    ids: tuple[int, int] | None = None


# --- the tools -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Tools:
    bwrap: str
    nsenter: str
    env: str  # also run inside: under /usr or a top-level link, like sh and readlink
    sh: str
    readlink: str
    setpriv: str | None  # util-linux: needed only when the portal is root
    disable_userns: bool  # bubblewrap >= 0.8


@functools.cache
def _tools() -> _Tools:
    outside = os.pathsep.join(p for p in (os.environ.get("PATH", ""), SYSTEM_PATH) if p)
    found = {name: shutil.which(name, path=outside) for name in ("bwrap", "nsenter")}
    found |= {name: shutil.which(name, path=SYSTEM_PATH)
              for name in ("env", "sh", "readlink", "setpriv")}
    if not found["bwrap"]:
        raise SandboxError("bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    missing = [name for name, path in found.items()
               if not path and (name != "setpriv" or _rooted())]
    if missing:
        raise SandboxError(f"{', '.join(missing)} not found (util-linux, coreutils)")
    usage = subprocess.run([found["bwrap"], "--help"], capture_output=True, text=True,  # noqa: S603
                           timeout=30, check=False).stdout
    return _Tools(**found, disable_userns="--disable-userns" in usage)


def _rooted() -> bool:
    """Whether the portal runs as root: sandboxes are then made as root and their commands
    run as an unprivileged host uid (see above)."""
    return os.geteuid() == 0


@functools.cache
def sandbox_problem() -> str | None:
    """None when sandboxes work on this machine, else why not. Probed once per process by
    running the portal's Python in a sandbox of each kind a replica uses."""
    try:
        _tools()
        with tempfile.TemporaryDirectory(prefix=f"{PROBE_DIR}{_probe_label()}:") as tmp:
            pid_file = Path(tmp) / "netns.pid"
            try:
                for network in ("none", netns_start(pid_file, _probe_label())):
                    result = sandbox_command(
                        Sandbox(network=network, hostname="probe"),
                        [sys.executable, "-I", "-S", "-c", "pass"],
                    ).run(capture_output=True, text=True, timeout=60, check=False)
                    if result.returncode != 0:
                        why = (result.stderr.strip().splitlines() or ["no message"])[-1]
                        return (f"bubblewrap cannot make a sandbox here "
                                f"(exit {result.returncode}): {why}")
            finally:
                netns_stop(pid_file)
    except SandboxError as exc:
        return str(exc)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap cannot make a sandbox here: {exc}"
    return None


# --- what the sandbox sees -------------------------------------------------------------------

# What a trainer may import of ours (and the runner every replica starts under).
CLIENT_PACKAGES = ("paddlecloud_core", "paddlecloud_client", "paddlecloud_sdk")


def client_dirs() -> list[Path]:
    """The directories of CLIENT_PACKAGES as this process imports them (bound read-only in
    every sandbox: source code, no secrets). Callers put their parents on the sandbox's
    PYTHONPATH when the sandboxed Python might look elsewhere (an editable install of another
    checkout)."""
    found = []
    for name in CLIENT_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        locations = list(spec.submodule_search_locations or []) if spec else []
        if locations:
            found.append(Path(locations[0]))
    return found


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def world_readable(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IROTH) and (not stat.S_ISDIR(mode) or bool(mode & stat.S_IXOTH))


def _system_mounts() -> list[tuple[str, list[str]]]:
    """(where, bwrap arguments) of the system view."""
    mounts = [("/usr", ["--ro-bind", "/usr", "/usr"])]
    for name in TOP_LEVEL:
        path = f"/{name}"
        if os.path.islink(path):
            mounts.append((path, ["--symlink", os.readlink(path), path]))
        elif os.path.isdir(path):
            mounts.append((path, ["--ro-bind", path, path]))
    for name in ETC:
        path = f"/etc/{name}"
        if world_readable(path):
            mounts.append((path, ["--ro-bind", path, path]))
    for path in dict.fromkeys((sys.base_prefix, sys.prefix, *map(str, client_dirs()))):
        if path and path != "/" and not any(_inside(path, p) for p, _ in mounts):
            mounts.append((path, ["--ro-bind", path, path]))
    mounts += [("/proc", ["--proc", "/proc", "--remount-ro", "/proc"]), ("/dev", ["--dev", "/dev"]),
               # Everyone's, sticky, as on any host: the command may not be their owner.
               (PRIVATE_SHM, ["--perms", "1777", "--tmpfs", PRIVATE_SHM]),
               (PRIVATE_TMP, ["--perms", "1777", "--tmpfs", PRIVATE_TMP])]
    return mounts


def sandbox_shows(path: str) -> bool:
    """Whether every sandbox shows ``path`` already (the system view: /usr, /etc's entries,
    Python's prefixes)."""
    return any(_inside(path, where) for where, args in _system_mounts()
               if args[0] == "--ro-bind")


def _bind_mounts(binds: Sequence[Bind]) -> list[tuple[str, list[str]]]:
    writable = [bind.target for bind in binds if bind.writable]
    mounts = []
    for bind in binds:
        for path in (bind.src, bind.target):
            if not path.startswith("/") or os.path.normpath(path) != path or path == "/":
                raise SandboxError(f"bind {path!r}: must be an absolute, normal path below /")
        if os.path.islink(bind.src) or not os.path.exists(bind.src):
            raise SandboxError(f"bind {bind.src}: not there, or a link")
        # bwrap would make the mount point through a directory the sandbox can write.
        if any(_inside(bind.target, w) and bind.target != w for w in writable):
            raise SandboxError(f"bind {bind.target}: inside a writable bind")
        mounts.append((bind.target, ["--bind" if bind.writable else "--ro-bind",
                                     bind.src, bind.target]))
    return mounts


# Run in the sandbox before the command: it opens /dev/null as the command's stdin (bwrap read
# its arguments there and closed it); a sandbox joined to a job's network checks that it is in
# the namespace the job's holder made (a holder that died and whose pid was reused in between
# cannot put a job on the host's network); then it writes its own /etc/hosts (in its own
# tmpfs), so that its hostname resolves to 127.0.0.1 — gloo looks it up.
# How a job's entry (a shell command) runs in a sandbox, so that SIGTERM (a stop, its grace
# period) reaches what it runs and the sandbox lasts until that has ended: the shell that runs
# it is the sandbox's main process, and ended at once it would end the sandbox
# (``--die-with-parent``), killing a trainer in the middle of saving a checkpoint as it is
# stopped. A simple command (``python train.py``) takes the shell's place (``exec``): it is
# the main process, gets the signal as it would anywhere and nothing reports its end. Any
# other entry (a list, a pipeline, a builtin, an assignment) runs under a shell that traps
# the signal, waits for the command to end and exits as the signal would have made it (143,
# 130) — which reports a command killed by it ("Terminated") on the log, as a shell would.
STOPPABLE = 'trap "t=143" TERM; trap "t=130" INT; {entry}\nr=$?; exit ${{t:-$r}}'
_NOT_SIMPLE = re.compile(r"[;&|<>()`$\\\n{}!*?\[\]'\"#~]")
_BUILTINS = frozenset({"cd", "export", "set", "unset", "source", ".", "if", "for", "while",
                       "until", "case", "exec", "eval", "alias", "ulimit", "umask", "trap",
                       "read", "wait", "time", "shift", "return", "exit", "command", "local",
                       "readonly", "type", "hash", "getopts", "jobs", "fg", "bg"})


def stoppable(entry: str) -> str:
    """The entry as the sandbox's shell runs it (``STOPPABLE``): a simple command in the
    shell's place, anything else under a shell that outlives it on SIGTERM or SIGINT."""
    words = entry.split()
    if words and not _NOT_SIMPLE.search(entry) and "=" not in words[0] \
            and words[0] not in _BUILTINS:
        return f"exec {entry}"
    return STOPPABLE.format(entry=entry)


PRELUDE = (
    f'exec < /dev/null || exit {SETUP_FAILED}; '
    'if [ -n "$2" ] && [ "$("$1" /proc/self/ns/net)" != "net:[$2]" ]; then '
    f'echo "sandbox: not in the job\'s network namespace" >&2; exit {SETUP_FAILED}; fi; '
    'printf "127.0.0.1\\tlocalhost %s\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n" "$3" '
    f'> /etc/hosts || exit {SETUP_FAILED}; '
    'shift 3; exec "$@"')


@dataclass(frozen=True)
class SandboxCommand:
    """How to run a command in a sandbox. ``argv`` is the command line, with nothing secret
    in it; ``args`` are the rest of bwrap's arguments, NUL-terminated: ``--clearenv`` and a
    ``--setenv NAME VALUE`` for each variable, which bwrap reads from its stdin (``--args
    0``) and which must be fed from memory: ``stdin()``, or ``attempt_start(stdin=args)``
    for a replica; ``run`` and ``popen`` are ``subprocess``'s, fed so. ``args`` is never
    shown in a repr."""

    argv: tuple[str, ...]
    args: bytes = field(repr=False)

    @contextlib.contextmanager
    def stdin(self) -> Iterator[int]:
        """A descriptor to give the command as its stdin (a memfd holding ``args``), closed
        at the end of the block: once a child has it, it has its own copy."""
        fd = memory_fd(self.args)
        try:
            yield fd
        finally:
            os.close(fd)

    def run(self, **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run`` of the command, fed its arguments (so no ``stdin`` or
        ``input`` of the caller's)."""
        with self.stdin() as fd:
            return subprocess.run(self.argv, stdin=fd, **kwargs)  # noqa: S603

    def popen(self, **kwargs) -> subprocess.Popen:
        """``subprocess.Popen`` of the command, fed its arguments."""
        with self.stdin() as fd:
            return subprocess.Popen(self.argv, stdin=fd, **kwargs)  # noqa: S603


def sandbox_command(sandbox: Sandbox, command: Sequence[str]) -> SandboxCommand:
    """What runs ``command`` in ``sandbox``: ``env`` (signals, see above), then ``nsenter``
    into the job's network when it has one, then ``bwrap`` (reading its ``--args`` on its
    stdin), then ``PRELUDE`` and ``env`` inside. It needs nothing from the environment it is
    started with: start it with a minimal one."""
    tools = _tools()
    if not command or "=" in command[0]:
        raise SandboxError(f"command {list(command)!r}: empty, or its program has a '='")
    for name, value in sandbox.env.items():
        if not name or "=" in name or "\0" in name + value:
            raise SandboxError(f"environment variable {name!r}: not a valid name or value")
    cwd = os.fspath(sandbox.cwd)
    if not cwd.startswith("/"):
        raise SandboxError(f"cwd {cwd!r}: must be an absolute path")
    hostname = sandbox.hostname[:HOSTNAME_MAX]
    if not HOSTNAME_RE.fullmatch(hostname):
        raise SandboxError(f"hostname {hostname!r}: letters, digits, '.' and '-' only")

    rooted = _rooted()
    outer = [tools.env, "--ignore-signal=TERM,INT"]
    inode = ""
    network = sandbox.network
    if isinstance(network, Netns):
        if not netns_alive(network):
            raise SandboxError(f"the job's network is gone (its holder, pid {network.pid}, "
                               "is not running)")
        if rooted:  # root enters the network alone: no user namespace (see above)
            outer += [tools.nsenter, f"--net=/proc/{network.pid}/ns/net", "--"]
        else:
            # --preserve-credentials: the holder denied setgroups in its user namespace
            # (which an unprivileged portal must), so nsenter's own setgroups would fail.
            outer += [tools.nsenter, "--preserve-credentials",
                      f"--user=/proc/{network.pid}/ns/user",
                      f"--net=/proc/{network.pid}/ns/net", "--"]
        inode = str(network.inode)
    elif network not in ("none", "host"):
        raise SandboxError(f"network {network!r}: must be 'none', 'host' or a job's Netns")

    mounts = sorted(_system_mounts() + _bind_mounts(sandbox.binds),
                    key=lambda mount: Path(mount[0]).parts)  # parents before children
    if rooted:
        # Made as root, with no capability left but those setpriv needs to become ``ids``.
        identity = ["--cap-drop", "ALL", *[arg for cap in ("SETUID", "SETGID", "SETPCAP")
                                           for arg in ("--cap-add", f"CAP_{cap}")]]
        uid, gid = sandbox.ids or NOBODY
        if not uid or not gid:
            raise SandboxError(f"ids {sandbox.ids!r}: a sandbox never runs as root")
        become = [tools.setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                  "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        identity = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID),
                    *(["--disable-userns"] if tools.disable_userns else []), "--cap-drop", "ALL"]
        become = []
    argv = [tools.bwrap, "--die-with-parent", *identity,
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            *(["--unshare-net"] if network == "none" else []),
            "--hostname", hostname]
    made = {"/"}
    for where, args in mounts:
        # The directories a mount point needs, made world-searchable: bubblewrap would give
        # them the modes of the host's (``/root``'s 0700 would hide the portal's Python from
        # a command run as ``ids``).
        for parent in list(reversed(Path(where).parents))[1:]:
            if str(parent) not in made and not any(
                    _inside(str(parent), m) for m, a in mounts
                    if m != str(parent) and a[0] in ("--bind", "--ro-bind")):
                argv += ["--perms", "0755", "--dir", str(parent)]
            made.add(str(parent))
        made.add(where)
        argv += args
    # The environment: never on the command line (see above), read from bwrap's stdin.
    argv += ["--args", "0", "--chdir", cwd, "--"]
    given = ["--clearenv"]
    for name, value in sandbox.env.items():
        given += ["--setenv", name, value]
    inner = [tools.sh, "-c", PRELUDE, "sandbox", tools.readlink, inode, hostname,
             *become, tools.env, "--default-signal=TERM,INT", "--", *command]
    return SandboxCommand(argv=(*outer, *argv, *inner),
                          args=b"".join(os.fsencode(arg) + b"\0" for arg in given))


def _probe_label() -> str:
    """What names a probe's network holder: its prober (pid and start), so that a holder
    whose prober was killed mid-probe is known as left over (``leftovers_stop``). Its
    directory's name carries the same (``probe_dirs_left``)."""
    return f"probe:{os.getpid()}:{start_of(os.getpid())}"


# A probe's directory: ``<PROBE_DIR><its label>:<random>`` in the temporary directory.
PROBE_DIR = "paddlecloud-sandbox-probe-"


def probe_dirs_left() -> list[Path]:
    """The directories of probes whose prober is gone (killed in the middle of one)."""
    left = []
    for path in Path(tempfile.gettempdir()).glob(f"{PROBE_DIR}*"):
        label = path.name.removeprefix(PROBE_DIR).rpartition(":")[0]
        if probe_left(label):
            left.append(path)
    return left

def probe_left(label: str) -> bool:
    """Whether ``label`` is a probe's whose prober is gone (killed in the middle of it). Any
    process may carry a holder's marker: a label that is not ours is not a probe's."""
    match = re.fullmatch(r"probe:(\d+):(\d+)", label)
    return bool(match) and start_of(int(match[1])) != int(match[2])


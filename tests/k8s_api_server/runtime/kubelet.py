"""The process kubelet: the scheduled pods of the fake cluster really run, on this machine.

For each pod bound to a node it makes a sandbox (a network namespace with the pod's IP, the
kubelet's /etc/hosts and resolv.conf, the pod's volumes as directories on this machine), runs
the init containers one after the other, then the containers, each as a process tree
(``container.py``), and turns what the processes do into the pod's status, as a kubelet does:
exit codes and OOM kills become container states, the pod's phase follows its restartPolicy,
stdout and stderr are the containers' logs, and deleting a pod sends SIGTERM to every
container, SIGKILL after its grace period, and removes the pod once nothing runs.

Scheduling, image-pull holds and the rest of the bookkeeping are the scripted kubelet's
(``Kubelet``); only what happens on the node is different."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import resources
from ..env import ContainerConfigError, Sources, container_command, expand, pod_env, pod_fields
from ..kubelet import Kubelet, _PodRuntime, _running_status, _terminated
from ..objects import set_condition
from ..quantity import Quantity
from ..storage import claim_source
from .container import Container, ContainerSpec, Mount, sweep_cgroups
from .dns import ZONE, DnsServer
from .forward import HostForward
from .network import PREFIX, ClusterNetwork, dead_owner, sweeping

# The containers' PATH: the Python environment running the fake cluster first (images are not
# pulled: pods run this machine's programs), then the usual image PATH.
PATH = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/sbin", "/usr/local/bin",
                        "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
# The "image"'s own packages: PaddleCloud's (its SDK: a session's launcher, ``report``) of the
# checkout this harness runs from, at the end of the containers' PYTHONPATH, as an image has
# them installed (``pip install paddlecloud``). The Python environment may have another
# checkout installed (editable), which the containers' ``python`` would import otherwise.
IMAGE_PYTHONPATH = str(Path(__file__).resolve().parents[3])
LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048  # terminationMessagePolicy FallbackToLogsOnError
# How long an ended container waits for its reader (the last lines of its output) before it
# is reported ended anyway.
READER_GRACE_SECONDS = 5.0


class MountError(Exception):
    """A volume cannot be set up (the kubelet's FailedMount message); the pod waits."""


@dataclass
class _Run:
    """One run of one container."""

    container: Container
    reader: threading.Thread
    tail: list[str] = field(default_factory=list)  # the last lines, for the termination message
    exited_at: float | None = None  # when its process was first seen ended, its reader not


@dataclass
class _Sandbox:
    uid: str
    ip: str
    root: Path  # the pod's directory on this machine: volumes, etc files
    volumes: dict[str, tuple[str, bool]]  # name -> (path, always read-only)
    etc_files: dict[str, str]
    hostname: str
    runs: dict[str, _Run] = field(default_factory=dict)  # containers that have a process
    init_done: int = 0  # init containers that completed
    stop_sent_at: float | None = None
    kill_at: float | None = None


class ProcessKubelet(Kubelet):
    """A ``Kubelet`` whose pods run as processes. ``close()`` stops every pod and removes the
    network, DNS, cgroups and files it made."""

    def __init__(self, api, logs):
        missing = [tool for tool in ("ip", "nsenter", "bwrap", "setpriv") if not shutil.which(tool)]
        if os.geteuid() != 0 or missing:
            raise RuntimeError("the process kubelet runs pods in namespaces of their own: it "
                               "needs root" + (f" and {', '.join(missing)}" if missing else "")
                               + " (./dev test installs bubblewrap)")
        super().__init__(api, logs)
        with sweeping():
            sweep_cgroups(dead_owner)  # what a killed test run left, and its files:
            for parent in (Path(tempfile.gettempdir()), Path("/dev/shm")):
                for left in parent.glob(f"{PREFIX}-*"):
                    if dead_owner(left.name):
                        shutil.rmtree(left, ignore_errors=True)
        self.network = ClusterNetwork().open()
        try:
            self.dns = DnsServer(api.store, self.network.node_netns_path,
                                 self.network.gateway).start()
        except BaseException:
            self.network.close()
            raise
        self.root = Path(tempfile.mkdtemp(prefix=f"{self.network.tag}-"))
        self.shm_root = Path("/dev/shm") / self.network.tag  # emptyDir medium: Memory
        self.sandboxes: dict[str, _Sandbox] = {}
        self.forwards: dict[int, HostForward] = {}  # the node's port -> its forward
        self._forward_errors: list[str] = []  # of forwards stopped
        self._readers: list[threading.Thread] = []  # of torn-down pods' containers
        self._mount_problems: dict[str, str] = {}  # pod uid -> the last FailedMount message
        api.kubelet_stops_pods = True  # a deleted pod goes once its processes have ended

    def close(self) -> None:
        with self.api.store.lock:
            for uid in list(self.sandboxes):
                self._teardown(uid)
        for reader in self._readers:
            reader.join(timeout=5)
        for port in list(self.forwards):
            self.stop_forward(port)
        self.dns.stop()
        self.network.close()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.shm_root, ignore_errors=True)
        sweep_cgroups(lambda name: name.startswith(self.network.tag + "-"))

    @property
    def errors(self) -> list[str]:
        """The DNS server's and the host forwards' failures (bugs of the fake, which the test
        fixture reports)."""
        return self.dns.errors + self._forward_errors + \
            [e for f in self.forwards.values() for e in f.errors]

    # --- host services -----------------------------------------------------------------

    def forward_host_port(self, host_port: int, *, port: int | None = None) -> tuple[str, int]:
        """Make ``127.0.0.1:host_port`` of this machine (a server a test runs, the portal)
        reachable from pods at the node's address on the pod network (the bridge's) and
        ``port`` (``host_port`` unless told): the endpoint a Service without a selector can
        name (``FakeKubernetes.expose_host_port``). That address and port; stopped by
        ``stop_forward(port)`` or with the cluster."""
        port = port or host_port
        if port in self.forwards:
            raise ValueError(f"port {port} of the node is forwarded already")
        self.forwards[port] = HostForward(self.network.node_netns_path, self.network.gateway,
                                          port, host_port).start()
        return self.network.gateway, port

    def stop_forward(self, port: int) -> None:
        forward = self.forwards.pop(port, None)
        if forward is not None:
            forward.stop()
            self._forward_errors += forward.errors

    # --- the loop ----------------------------------------------------------------------

    def sync(self) -> None:
        super().sync()
        alive = {p["metadata"]["uid"] for p in self.api.store.list(resources.PODS.key)}
        for uid in [u for u in self.sandboxes if u not in alive]:
            self._teardown(uid)  # removed (or force-deleted): whatever still runs is killed

    def _sync_termination(self, pod: dict) -> bool | None:
        if not pod["metadata"].get("deletionTimestamp"):
            return None
        return self._terminate_pod(pod, self.sandboxes.get(pod["metadata"]["uid"]))

    def _finished(self, pod: dict) -> None:
        """A finished pod's sandbox goes (its status keeps the IP), once nothing runs."""
        sandbox = self.sandboxes.get(pod["metadata"]["uid"])
        if sandbox is not None:
            self._collect(pod, sandbox)
            if not sandbox.runs:
                self._teardown(sandbox.uid)

    def _run(self, pod: dict, runtime: _PodRuntime) -> None:
        sandbox = self.sandboxes.get(pod["metadata"]["uid"])
        if sandbox is not None:
            self._collect(pod, sandbox)
        if pod["status"]["phase"] == "Pending":
            self._start(pod, runtime)
        if pod["status"]["phase"] == "Running":
            self._restart_backed_off(pod, runtime)

    # --- starting ------------------------------------------------------------------------

    def _start(self, pod: dict, runtime: _PodRuntime) -> None:
        if self._held(pod, runtime):
            return
        uid = pod["metadata"]["uid"]
        sandbox = self.sandboxes.get(uid) or self._make_sandbox(pod)
        if sandbox is None:
            return
        inits = pod["spec"].get("initContainers") or []
        if sandbox.init_done < len(inits):
            container = inits[sandbox.init_done]
            if container["name"] not in sandbox.runs and not self._backing_off(runtime,
                                                                                container):
                self._initializing(pod)
                self._launch(pod, sandbox, container, init=True)
            return
        status = pod["status"]
        for container in pod["spec"]["containers"]:
            if self._launch(pod, sandbox, container, init=False) is None:
                return  # CreateContainerConfigError: the pod stays Pending, the kubelet retries
        status["phase"] = "Running"
        self._settle(pod)

    def _backing_off(self, runtime: _PodRuntime, container: dict) -> bool:
        at = runtime.restart_at.get(container["name"])
        if at is None:
            return False
        if time.monotonic() < at:
            return True
        del runtime.restart_at[container["name"]]
        return False

    def _initializing(self, pod: dict) -> None:
        conditions = pod["status"].setdefault("conditions", [])
        pending = [c["name"] for c in pod["spec"]["initContainers"]]
        set_condition(conditions, "Initialized", "False", reason="ContainersNotInitialized",
                      message=f"containers with incomplete status: [{' '.join(pending)}]")
        for entry in pod["status"]["containerStatuses"]:
            if "waiting" in entry["state"]:
                entry["state"] = {"waiting": {"reason": "PodInitializing"}}

    def _make_sandbox(self, pod: dict) -> _Sandbox | None:
        """The pod's IP, its kubelet-managed files and its volumes; None (and a FailedMount
        event, once per problem) while a volume cannot be set up."""
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        root = self.root / uid
        root.mkdir(exist_ok=True)
        try:
            volumes = {v["name"]: self._volume(pod, v, root) for v in spec.get("volumes") or []}
        except MountError as exc:
            message = str(exc)
            if self._mount_problems.get(uid) != message:  # one event per problem, not per pass
                self._mount_problems[uid] = message
                self.api.recorder.record(resources.PODS, pod, "Warning", "FailedMount", message,
                                         component="kubelet", host=spec.get("nodeName"))
            return None
        self._mount_problems.pop(uid, None)
        self._apply_fs_group(pod, volumes)
        ip = self.network.add_pod(uid)
        hostname = (spec.get("hostname") or meta["name"])[:63]
        namespace = meta["namespace"]
        fqdn = f"{hostname}.{spec['subdomain']}.{namespace}.svc.{ZONE}" \
            if spec.get("subdomain") else None
        etc = root / "etc"
        etc.mkdir(exist_ok=True)
        (etc / "hosts").write_text(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
            "fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
            + (f"{ip}\t{fqdn}\t{hostname}\n" if fqdn else f"{ip}\t{hostname}\n"))
        (etc / "resolv.conf").write_text(
            f"search {namespace}.svc.{ZONE} svc.{ZONE} {ZONE}\n"
            f"nameserver {self.network.gateway}\noptions ndots:5\n")
        (etc / "hostname").write_text(hostname + "\n")
        sandbox = _Sandbox(uid, ip, root, volumes,
                           {f"/etc/{name}": str(etc / name)
                            for name in ("hosts", "resolv.conf", "hostname")}, hostname)
        self.sandboxes[uid] = sandbox
        status = pod["status"]
        status.update(podIP=ip, podIPs=[{"ip": ip}])
        set_condition(status.setdefault("conditions", []), "PodReadyToStartContainers", "True")
        return sandbox

    # --- volumes -----------------------------------------------------------------------

    def _volume(self, pod: dict, volume: dict, root: Path) -> tuple[str, bool]:
        """(the volume's directory on this machine, whether it is always read-only)."""
        name = volume["name"]
        if "emptyDir" in volume:
            base = self.shm_root / pod["metadata"]["uid"] \
                if volume["emptyDir"].get("medium") == "Memory" else root / "volumes"
            path = base / name
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)  # as the kubelet makes emptyDirs
            return str(path), False
        if "configMap" in volume or "secret" in volume:
            return self._projected(pod, volume, root / "volumes" / name), True
        return self._source_path(pod, volume), False

    def _source_path(self, pod: dict, source: dict) -> str:
        """A volume source that names storage outside the pod: hostPath, local, nfs (mapped to
        a directory by ``Settings.nfs_exports``), or a claim, through its bound volume."""
        if "hostPath" in source:
            path, kind = source["hostPath"]["path"], source["hostPath"].get("type", "")
            if not os.path.exists(path):
                if kind not in ("", "DirectoryOrCreate", "FileOrCreate"):
                    raise MountError(f'MountVolume.SetUp failed for volume "{source.get("name")}"'
                                     f' : hostPath type check failed: {path} is not a '
                                     f'{"directory" if kind == "Directory" else kind.lower()}')
                if kind == "FileOrCreate":
                    Path(path).touch()
                else:
                    os.makedirs(path, mode=0o755)
            return path
        if "local" in source:
            return source["local"]["path"]
        if "nfs" in source:
            export = f"{source['nfs']['server']}:{source['nfs']['path']}"
            path = self.api.settings.nfs_exports.get(export)
            if path is None:
                raise MountError(f'MountVolume.SetUp failed for volume "{source.get("name")}" : '
                                 f"mount failed: exit status 32: mount.nfs: access denied by "
                                 f"server while mounting {export}")
            return path
        if "persistentVolumeClaim" in source:
            return self._claim_path(pod, source)
        kinds = sorted(set(source) - {"name"})
        raise MountError(f'MountVolume.SetUp failed for volume "{source.get("name")}" : the '
                         f"process kubelet does not support {', '.join(kinds)} volumes")

    def _claim_path(self, pod: dict, source: dict) -> str:
        claim = source["persistentVolumeClaim"]["claimName"]
        found = claim_source(self.api.store, pod["metadata"]["namespace"], claim)
        if found is None:  # the scheduler let it through: deleted or unbound since
            raise MountError(f'MountVolume.SetUp failed for volume "{source["name"]}" : '
                             f'persistentvolumeclaim "{claim}" is not bound')
        return self._source_path(pod, {"name": source["name"], **found})

    def _projected(self, pod: dict, volume: dict, path: Path) -> str:
        """A configMap or secret volume: its keys (or ``items``) as files, written once."""
        kind, ref = ("ConfigMap", volume["configMap"]) if "configMap" in volume \
            else ("Secret", volume["secret"])
        name = ref.get("name") or ref.get("secretName")
        obj = self.api.store.get(resources.CONFIGMAPS.key if kind == "ConfigMap"
                                 else resources.SECRETS.key, pod["metadata"]["namespace"], name)
        if obj is None:
            if ref.get("optional"):
                path.mkdir(parents=True, exist_ok=True)
                return str(path)
            raise MountError(f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
                             f'{kind.lower()} "{name}" not found')
        data = dict(obj.get("data") or {})
        if kind == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        items = ref.get("items") or [{"key": k, "path": k} for k in data]
        path.mkdir(parents=True, exist_ok=True)
        for item in items:
            target = path / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data.get(item["key"], ""))
            target.chmod(item.get("mode", ref.get("defaultMode", 0o644)))
        return str(path)

    def _apply_fs_group(self, pod: dict, volumes: dict[str, tuple[str, bool]]) -> None:
        """``fsGroup``: the pod's own volumes (emptyDir, configMap, secret) belong to the group,
        group-writable, new files inheriting it; hostPath and nfs are left as they are."""
        group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        if group is None:
            return
        owned = {v["name"] for v in pod["spec"].get("volumes") or []
                 if {"emptyDir", "configMap", "secret"} & set(v)}
        for name, (path, _) in volumes.items():
            if name not in owned:
                continue
            for directory, _, files in os.walk(path):
                os.chown(directory, -1, group)
                os.chmod(directory, os.stat(directory).st_mode | 0o2070)  # noqa: S103 (as fsGroup)
                for file in files:
                    os.chown(os.path.join(directory, file), -1, group)

    # --- containers ------------------------------------------------------------------------

    def _sources(self, namespace: str) -> Sources:
        def get(kind: str, name: str) -> dict | None:
            rt = resources.CONFIGMAPS if kind == "ConfigMap" else resources.SECRETS
            return self.api.store.get(rt.key, namespace, name)
        return Sources(get)

    def _container_spec(self, pod: dict, sandbox: _Sandbox, container: dict) -> ContainerSpec:
        env = pod_env(container, pod_fields(pod), self._sources(pod["metadata"]["namespace"]))
        argv = container_command(container, env)
        base = {"PATH": PATH, "HOSTNAME": sandbox.hostname, "HOME": "/root"}
        pod_security = pod["spec"].get("securityContext") or {}
        security = {**pod_security, **(container.get("securityContext") or {})}
        uid, gid = security.get("runAsUser"), security.get("runAsGroup")
        if security.get("runAsNonRoot") and not uid:
            raise ContainerConfigError("container has runAsNonRoot and image will run as root")
        if uid:
            base["HOME"] = "/"
        groups = tuple(g for g in (pod_security.get("fsGroup"),
                                   *(pod_security.get("supplementalGroups") or ()))
                       if g is not None)
        mounts = []
        for mount in container.get("volumeMounts") or []:
            path, always_ro = sandbox.volumes[mount["name"]]
            sub = mount.get("subPath") or expand(mount.get("subPathExpr", ""), env)
            if sub:
                path = os.path.join(path, sub)
                if not os.path.exists(path):
                    os.makedirs(path, mode=0o755)  # as the kubelet makes a missing subPath
            mounts.append(Mount(path, mount["mountPath"], always_ro or mount.get("readOnly",
                                                                                    False)))
        memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        env = {**base, **env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"),
                                                          IMAGE_PYTHONPATH]))
        return ContainerSpec(
            name=container["name"], argv=argv, env=env,
            netns_path=self.network.netns_path(sandbox.uid), hostname=sandbox.hostname,
            working_dir=container.get("workingDir"), mounts=mounts,
            etc_files=sandbox.etc_files, uid=uid, gid=gid if gid is not None else (
                0 if uid else None), groups=groups,
            no_new_privs=security.get("allowPrivilegeEscalation") is False,
            memory_limit=int(Quantity.parse(memory).value) if memory else None)

    def _launch(self, pod: dict, sandbox: _Sandbox, container: dict, *, init: bool
                ) -> _Run | None:
        """Start one run of ``container``; None (and CreateContainerConfigError) when its
        environment or command cannot be made."""
        name = container["name"]
        if name in sandbox.runs:
            return sandbox.runs[name]
        entries = pod["status"].get("initContainerStatuses" if init else "containerStatuses")
        entry = next(e for e in entries if e["name"] == name)
        try:
            spec = self._container_spec(pod, sandbox, container)
        except ContainerConfigError as exc:
            message = str(exc)
            if entry["state"].get("waiting", {}).get("message") != message:
                entry["state"] = {"waiting": {"reason": "CreateContainerConfigError",
                                              "message": message}}
                self._event(pod, "Warning", "Failed", f"Error: {message}", name)
            return None
        restarts = entry.get("restartCount", 0)
        if restarts:
            self.logs.restart(sandbox.uid, name)
        run = _Run(Container(spec, f"{self.network.tag}-{sandbox.uid}-{name}-{restarts}"),
                   threading.Thread())
        run.reader = threading.Thread(target=self._read, args=(sandbox.uid, name, run),
                                      name=f"fake-k8s-log-{name}", daemon=True)
        run.reader.start()
        sandbox.runs[name] = run
        entry.update(_running_status(container), restartCount=restarts,
                     lastState=entry.get("lastState") or {})
        if init:
            entry["ready"] = False
        for reason, message in (("Pulled", f'Container image "{container["image"]}" already '
                                           f"present on machine"),
                                ("Created", f"Created container {name}"),
                                ("Started", f"Started container {name}")):
            if reason != "Pulled" or not restarts:
                self._event(pod, "Normal", reason, message, name)
        return run

    def _read(self, uid: str, name: str, run: _Run) -> None:
        """The container's output, line by line, into its log (what ``kubectl logs`` reads)."""
        for raw in run.container.output:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            run.tail = ([*run.tail, line])[-LOG_TAIL_LINES:]
            self.logs.append(uid, name, [line])
        run.container.output.close()

    def _collect(self, pod: dict, sandbox: _Sandbox) -> None:
        """Containers whose process ended: their state, and what follows from it."""
        for name, run in list(sandbox.runs.items()):
            code = run.container.poll()
            if code is None:
                continue
            if run.reader.is_alive():
                # Every line it printed goes in its log first. The reader may be waiting for
                # the store's lock, which this pass holds: not joined here (every API call
                # and DNS question would wait too), the next pass looks again.
                now = time.monotonic()
                run.exited_at = run.exited_at or now
                if now - run.exited_at < READER_GRACE_SECONDS:
                    continue
            oom = run.container.oom_killed()
            run.container.cleanup()
            del sandbox.runs[name]
            reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
            inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
            if name in inits:
                self._init_ended(pod, sandbox, name, code, reason, run)
            elif pod["metadata"].get("deletionTimestamp") or \
                    pod["status"]["phase"] in ("Succeeded", "Failed"):
                self._stopped(pod, name, code, reason, run)
            else:
                self.terminate(pod, name, code, reason)
                self._add_message(pod, name, code, run)

    def _init_ended(self, pod: dict, sandbox: _Sandbox, name: str, code: int, reason: str,
                    run: _Run) -> None:
        entry = next(e for e in pod["status"]["initContainerStatuses"] if e["name"] == name)
        started = entry["state"].get("running", {}).get("startedAt")
        ended = _terminated(code, reason, entry.get("containerID", ""), started)
        entry.update(ready=code == 0, started=False)
        if code == 0:
            entry["state"] = {"terminated": ended}
            sandbox.init_done += 1
            if sandbox.init_done == len(pod["spec"]["initContainers"]):
                set_condition(pod["status"]["conditions"], "Initialized", "True")
            return
        self._add_message_to(pod, ended, code, run)
        if pod["spec"].get("restartPolicy", "Always") == "Never":
            entry["state"] = {"terminated": ended}
            pod["status"]["phase"] = "Failed"
            self._settle(pod)
            return
        entry["restartCount"] = entry.get("restartCount", 0) + 1
        self._back_off(pod, entry, ended)

    def _stopped(self, pod: dict, name: str, code: int, reason: str, run: _Run) -> None:
        """A container of a pod being deleted (or already finished) ended: it stays ended."""
        entry = next(e for e in pod["status"].get("containerStatuses") or []
                     if e["name"] == name)
        started = entry["state"].get("running", {}).get("startedAt")
        ended = _terminated(code, reason, entry.get("containerID", ""), started)
        self._add_message_to(pod, ended, code, run)
        entry.update(ready=False, started=False, state={"terminated": ended})
        self._settle(pod)

    def _add_message(self, pod: dict, name: str, code: int, run: _Run) -> None:
        entry = next(e for e in pod["status"]["containerStatuses"] if e["name"] == name)
        ended = entry["state"].get("terminated") or entry["lastState"].get("terminated")
        if ended is not None:
            self._add_message_to(pod, ended, code, run)

    def _add_message_to(self, pod: dict, ended: dict, code: int, run: _Run) -> None:
        """``FallbackToLogsOnError``: a failed container's message is the end of its log."""
        container = next((c for c in (pod["spec"].get("initContainers") or [])
                          + pod["spec"]["containers"] if c["name"] == run.container.spec.name),
                         {})
        if code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            text = "\n".join(run.tail)
            if text:
                ended["message"] = text.encode()[-LOG_TAIL_BYTES:].decode("utf-8", "replace")

    def _restart_backed_off(self, pod: dict, runtime: _PodRuntime) -> None:
        """Containers whose CrashLoopBackOff is over run again, as new processes."""
        now = time.monotonic()
        sandbox = self.sandboxes.get(pod["metadata"]["uid"])
        due = [name for name, at in runtime.restart_at.items() if now >= at]
        if sandbox is None or not due:
            return
        for name in due:
            del runtime.restart_at[name]
            entry = next(e for e in pod["status"]["containerStatuses"] if e["name"] == name)
            entry["restartCount"] = entry.get("restartCount", 0) + 1
            container = next(c for c in pod["spec"]["containers"] if c["name"] == name)
            self._launch(pod, sandbox, container, init=False)
        self._settle(pod)

    # --- stopping ------------------------------------------------------------------------

    def _terminate_pod(self, pod: dict, sandbox: _Sandbox | None) -> bool:
        """A pod being deleted: SIGTERM to every container, SIGKILL once the grace period is
        over, and the pod goes when nothing of it runs. False once removed."""
        if sandbox is not None:
            self._collect(pod, sandbox)
        if sandbox is None or not sandbox.runs:
            if pod["status"].get("phase") not in ("Succeeded", "Failed"):
                # It fails first, as a kubelet reports it: a Job's controller takes its
                # tracking finalizer off a finished pod only.
                self.set_phase(pod, "Failed", None, None)
                return True
            self.api.remove_terminated_pod(pod)
            return False
        now = time.monotonic()
        grace = pod["metadata"].get("deletionGracePeriodSeconds") or 0
        if sandbox.stop_sent_at is None:
            sandbox.stop_sent_at = now
            sandbox.kill_at = now + grace
            for name, run in sandbox.runs.items():
                self._event(pod, "Normal", "Killing", f"Stopping container {name}", name)
                run.container.signal(signal.SIGTERM if grace else signal.SIGKILL)
            return True
        sandbox.kill_at = min(sandbox.kill_at, now + grace)  # deleted again, more urgently
        if now >= sandbox.kill_at:
            for run in sandbox.runs.values():
                run.container.signal(signal.SIGKILL)
        return True

    def signal_container(self, pod: dict, container: str | None, number: int) -> None:
        """Send signal ``number`` to a running container's PID 1 (every running one when
        ``container`` is None), as a node's OOM killer or a ``kill`` inside would."""
        sandbox = self.sandboxes.get(pod["metadata"]["uid"])
        runs = {} if sandbox is None else sandbox.runs
        names = [container] if container else list(runs)
        if not names or any(n not in runs for n in names):
            raise ValueError(f"no such running container in pod {pod['metadata']['name']}")
        for name in names:
            runs[name].container.signal(number)

    def set_phase(self, pod: dict, phase: str, reason: str | None, message: str | None) -> None:
        sandbox = self.sandboxes.get(pod["metadata"]["uid"])
        if sandbox is not None:
            for run in sandbox.runs.values():
                run.container.cleanup()
            self._readers += [run.reader for run in sandbox.runs.values()]
            sandbox.runs.clear()
        super().set_phase(pod, phase, reason, message)

    def _teardown(self, uid: str) -> None:
        sandbox = self.sandboxes.pop(uid, None)
        if sandbox is None:
            return
        for run in sandbox.runs.values():
            run.container.cleanup()
        # Their readers end once the output is read (they may be waiting for the store's lock,
        # held by the caller): ``close`` joins those still going.
        self._readers = [r for r in self._readers if r.is_alive()] + \
            [run.reader for run in sandbox.runs.values()]
        self.network.remove_pod(uid)
        shutil.rmtree(sandbox.root, ignore_errors=True)
        shutil.rmtree(self.shm_root / uid, ignore_errors=True)


"""A bare control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) for
developing the Kueue tooling before the real one (``control_plane.py``) is there: minimal
flags, an admin kubeconfig with a client certificate of ``system:masters``, no node. Not the
suite's: tests use ``real_kube``'s control plane where it exists (tests/real_kube_kueue)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.registry_server import free_port

from .kueue import Pki

BIN = Path(os.environ.get("PADDLECLOUD_KUBE_BIN", "/work/kubebuild/bin"))
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


class DevControlPlane:
    """Started by ``start``, stopped (every process, whatever happened) by ``stop``."""

    def __init__(self, state: Path):
        self.state = state
        self.processes: list[subprocess.Popen] = []
        self.kubeconfig = state / "admin.kubeconfig"
        self.url = ""

    def _run(self, name: str, *args: str) -> None:
        log = (self.state / f"{name}.log").open("w")
        self.processes.append(subprocess.Popen(
            [str(BIN / name), *args], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()

    def start(self) -> DevControlPlane:
        self.state.mkdir(parents=True, exist_ok=True)
        pki = Pki(self.state / "pki")
        serving = pki.server("kube-apiserver", "apiserver")
        admin = pki.client("admin", "system:masters", "admin")
        sa_key = pki.key_file("service-accounts")
        etcd, peer, api = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{api}"
        self._run("etcd", "--data-dir", str(self.state / "etcd"), "--name", "dev",
                  "--listen-client-urls", f"http://127.0.0.1:{etcd}",
                  "--advertise-client-urls", f"http://127.0.0.1:{etcd}",
                  "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                  "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                  "--initial-cluster", f"dev=http://127.0.0.1:{peer}", "--unsafe-no-fsync")
        self._run("kube-apiserver", f"--etcd-servers=http://127.0.0.1:{etcd}",
                  "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                  f"--secure-port={api}", f"--tls-cert-file={serving[0]}",
                  f"--tls-private-key-file={serving[1]}", f"--client-ca-file={pki.ca_file}",
                  "--authorization-mode=Node,RBAC", "--allow-privileged=true",
                  "--service-cluster-ip-range=10.96.0.0/16",
                  "--service-account-issuer=https://kubernetes.default.svc",
                  f"--service-account-key-file={sa_key}",
                  f"--service-account-signing-key-file={sa_key}")
        self.kubeconfig.write_text(pki.kubeconfig(self.url, *admin))
        self._wait_ready(pki, admin)
        common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false",
                  "--bind-address=127.0.0.1"]
        # Controllers and scheduler where built (nothing Kueue admits needs them).
        if (BIN / "kube-controller-manager").exists():
            self._run("kube-controller-manager", *common, f"--secure-port={free_port()}",
                      f"--service-account-private-key-file={sa_key}",
                      f"--root-ca-file={pki.ca_file}")
        if (BIN / "kube-scheduler").exists():
            self._run("kube-scheduler", *common, f"--secure-port={free_port()}")
        return self

    def _wait_ready(self, pki: Pki, admin: tuple[Path, Path]) -> None:
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        context.load_cert_chain(*map(str, admin))
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args[0]} exited {process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context,
                                            timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"kube-apiserver not ready within {READY_TIMEOUT:.0f} s")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()

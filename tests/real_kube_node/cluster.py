"""A minimal real control plane for the node agent's tests, until the suite's own (``./dev kube
up``, tests/real_kube) is there: etcd, kube-apiserver (a static admin token), the controller
manager and the scheduler from the binaries in ``KUBE_BIN_DIR`` (the lead's build by default),
all on free ports of 127.0.0.1, in a temporary directory; and the node agent
(``python -m tests.real_kube.node``) as the one node. ``stop()`` ends them all (the agent with
SIGTERM, as its users stop it) and removes the directory."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import requests
import urllib3
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ROOT = Path(__file__).resolve().parents[2]
# KUBE_BIN_DIR, the lead's scratch build, or the build cache of tests/real_kube/build.py
BIN_CANDIDATES = (os.environ.get("KUBE_BIN_DIR", ""), "/work/kubebuild/bin",
                  *sorted(map(str, Path.home().glob(".cache/paddlecloud/kube/v1.35.4*/bin"))))
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def bin_dir() -> Path | None:
    for candidate in BIN_CANDIDATES:
        if candidate and all((Path(candidate) / b).is_file() for b in BINARIES):
            return Path(candidate)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControlPlane:
    def __init__(self, node: str = "pc-node-1"):
        self.bin = bin_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="pc-real-kube-node-"))
        self.node = node
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.procs: dict[str, subprocess.Popen] = {}
        self.agent: subprocess.Popen | None = None
        self.agent_port: int | None = None

    # --- starting -----------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.dir / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def _start(self) -> None:
        d = self.dir
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (d / "sa.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()))
        (d / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")
        self.kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: real
  cluster: {{server: "{self.url}", insecure-skip-tls-verify: true}}
users:
- name: admin
  user: {{token: "{self.token}"}}
contexts:
- name: real
  context: {{cluster: real, user: admin}}
current-context: real
""")
        etcd_port, peer_port = free_port(), free_port()
        self._spawn("etcd", [str(self.bin / "etcd"), "--data-dir", str(d / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
                             "--unsafe-no-fsync"])
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--secure-port={self.port}", "--bind-address=127.0.0.1",
            f"--cert-dir={d / 'certs'}", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d / 'sa.key'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--authorization-mode=RBAC,Node", f"--token-auth-file={d / 'tokens.csv'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--endpoint-reconciler-type=none",
            "--kubelet-preferred-address-types=InternalIP"])
        self.wait(lambda: self._get("/readyz").status_code == 200, 90, "the API server ready")
        common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false"]
        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), *common,
            f"--service-account-private-key-file={d / 'sa.key'}",
            "--use-service-account-credentials=false", "--secure-port=0",
            "--cluster-signing-duration=1h"])
        self._spawn("kube-scheduler", [str(self.bin / "kube-scheduler"), *common,
                                       "--secure-port=0"])
        self.start_agent()

    def start_agent(self) -> None:
        log = (self.dir / "node.log").open("ab")
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "tests.real_kube.node", "--kubeconfig", str(self.kubeconfig),
             "--name", self.node, "--dir", str(self.dir / "node")],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        log.close()
        line = self.agent.stdout.readline().decode()
        if not line.startswith("ready "):
            raise RuntimeError(f"the node agent did not start: {self.log('node')[-3000:]}")
        self.agent_port = int(line.split()[1])

    def stop_agent(self) -> int | None:
        """SIGTERM to the agent; its exit status."""
        if self.agent is None:
            return None
        agent, self.agent = self.agent, None
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
        try:
            code = agent.wait(60)
        except subprocess.TimeoutExpired:
            agent.kill()
            code = agent.wait()
        agent.stdout.close()
        return code

    # --- helpers -------------------------------------------------------------------------

    def _get(self, path: str) -> requests.Response:
        try:
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            return requests.get(self.url + path, verify=False, timeout=5,  # noqa: S501 (self-signed)
                                headers={"Authorization": f"Bearer {self.token}"})
        except requests.RequestException:
            return requests.Response()

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @staticmethod
    def wait(predicate, timeout: float, message: str, interval: float = 0.2):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {message}")
            time.sleep(interval)

    def stop(self) -> None:
        self.stop_agent()
        for name in reversed(list(self.procs)):
            proc = self.procs.pop(name)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

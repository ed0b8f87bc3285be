"""The real control plane for the node agent's own tests: tests/real_kube's (``control_plane.up``
in a temporary directory) without its node, and the node agent (``python -m
tests.real_kube.node``) as a process the tests start, kill and stop themselves. ``stop()`` ends
them all (the agent with SIGTERM, as its users stop it) and removes the directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.real_kube import control_plane

ROOT = Path(__file__).resolve().parents[2]


class ControlPlane:
    def __init__(self, node: str = "pc-node-1"):
        self.dir = Path(tempfile.mkdtemp(prefix="pc-real-kube-node-"))
        self.node = node
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.agent: subprocess.Popen | None = None
        self.agent_port: int | None = None

    def start(self) -> ControlPlane:
        try:
            control_plane.up(self.dir, node=False)
            self.start_agent()
        except BaseException:
            self.stop()
            raise
        return self

    def start_agent(self) -> None:
        log = (self.dir / "node.log").open("ab")
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "tests.real_kube.node", "--kubeconfig", str(self.kubeconfig),
             "--name", self.node, "--dir", str(self.dir / "agent")],
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
        control_plane.down(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)

"""tests/real_kube/build.py on a cache of the test's own (the Go build cache is the user's, so
this is a link, seconds, once ./dev test has built the binaries): a binary is built into a
directory named by the Kubernetes version and the pin's hash, with the release's version in
it; runs at once build it once; another pin is another directory."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from tests.real_kube import build
from tests.real_kube.control_plane import ROOT


def test_etcd_is_built_once_into_the_pins_directory(tmp_path, monkeypatch):
    # Go's build cache is under XDG_CACHE_HOME too: keep the user's (a link, not a build).
    go_cache = subprocess.run([build.go_binary(), "env", "GOCACHE"], capture_output=True,
                              text=True, timeout=60, check=True).stdout.strip()
    monkeypatch.setenv("GOCACHE", go_cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.kube_dir() == (tmp_path / "paddlecloud" / "kube"
                                / f"v1.35.4-{build.pin_hash()}" / "bin")
    runs = [subprocess.Popen([sys.executable, "-c",
                              "from tests.real_kube import build; build.ensure(('etcd',))"],
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    logs = []
    threads = [threading.Thread(target=lambda run=run: logs.append(run.communicate()[1]))
               for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert [run.returncode for run in runs] == [0, 0], logs
    assert sum("built etcd" in log for log in logs) == 1, logs  # the other waited for it
    etcd = build.kube_dir() / "etcd"
    assert sorted(p.name for p in etcd.parent.iterdir()) == ["etcd"]  # no temporary left
    version = subprocess.run([etcd, "--version"], capture_output=True, text=True, timeout=30)
    assert "etcd Version: 3.6.5" in version.stdout


def test_another_pin_is_another_directory(tmp_path, monkeypatch):
    module = tmp_path / "kube"
    module.mkdir()
    for name in ("go.mod", "go.sum"):
        (module / name).write_text((build.MODULE / name).read_text())
    monkeypatch.setattr(build, "MODULE", module)
    same = build.kube_dir()
    with open(module / "go.sum", "a") as go_sum:
        go_sum.write("example.com/changed v1.0.0 h1:AAAA=\n")
    assert build.kube_dir() != same and build.kube_dir().parent.name.startswith("v1.35.4-")

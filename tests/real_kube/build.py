"""The control plane's binaries, built from their Go modules at the versions kube/go.mod pins
and cached per user: etcd, kube-apiserver, kube-controller-manager and kube-scheduler in
``~/.cache/paddlecloud/kube/<kubernetes version>-<pin hash>/bin/``, Kueue in
``~/.cache/paddlecloud/kube/kueue-<version>/bin/``. The hash is go.mod's and go.sum's, so a
changed pin builds again, and clones of the repo share one build. Two runs at once build once
(a lock), and a build that dies leaves no half binary (built under a temporary name, then
renamed)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = Path(__file__).resolve().parents[2] / "kube"
KUEUE_VERSION = "v0.17.0"
MIN_GO = (1, 24)
# What each binary is built from, in the module.
PACKAGES = {
    "etcd": "./etcd",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
}
GO_HINT = ("install Go 1.24 or newer (https://go.dev/dl/: unpack it into /usr/local and put "
           "/usr/local/go/bin on PATH), or set GO to its go binary")


class BuildError(RuntimeError):
    pass


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "paddlecloud" / "kube"


def kubernetes_version() -> str:
    """k8s.io/kubernetes's version in kube/go.mod (v1.35.4)."""
    found = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (MODULE / "go.mod").read_text(), re.M)
    if not found:
        raise BuildError(f"{MODULE / 'go.mod'} requires no k8s.io/kubernetes")
    return found.group(1)


def pin_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((MODULE / name).read_bytes())
    return digest.hexdigest()[:12]


def kube_dir() -> Path:
    return cache_root() / f"{kubernetes_version()}-{pin_hash()}" / "bin"


def kueue_path() -> Path:
    return cache_root() / f"kueue-{KUEUE_VERSION}" / "bin" / "kueue"


def version_flags(version: str) -> str:
    """-ldflags that make the binaries say which release they are (``kubectl version``, and
    Kueue reads the server's version), as Kubernetes' own build does (hack/lib/version.sh)."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.gitVersion={version}", f"-X {package}.gitMajor={major}",
                  f"-X {package}.gitMinor={minor}", f"-X {package}.gitTreeState=clean"]
    return " ".join(flags)


def go_binary() -> str:
    """A go of at least MIN_GO, or BuildError saying how to get one."""
    candidates = [os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go"]
    for candidate in filter(None, candidates):
        try:
            version = subprocess.run([candidate, "env", "GOVERSION"], capture_output=True,
                                     text=True, timeout=60, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        found = re.match(r"go(\d+)\.(\d+)", version)
        if found and tuple(map(int, found.groups())) >= MIN_GO:
            return candidate
        raise BuildError(f"{candidate} is {version}, too old to build the control plane: "
                         + GO_HINT)
    raise BuildError("no Go to build the control plane: " + GO_HINT)


def _log(message: str) -> None:
    print(f"real_kube: {message}", file=sys.stderr, flush=True)


def _build(go: str, args: list[str], target: Path, name: str) -> None:
    """Runs ``go args`` that writes ``name`` into a temporary directory beside ``target``,
    then renames it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        started = time.monotonic()
        _log(f"building {name} (go {args[0]}: minutes on a cold Go build cache)")
        env = {**os.environ, "GOBIN": tmp, "GOFLAGS": "-mod=readonly"}
        output = ["-o", tmp] if args[0] == "build" else []  # go install writes into GOBIN
        done = subprocess.run([go, args[0], *output, *args[1:]],
                              cwd=MODULE, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"building {name} failed:\n{done.stderr[-4000:]}")
        os.replace(Path(tmp) / name, target)
        _log(f"built {name} in {time.monotonic() - started:.0f} s")


def ensure(names: tuple[str, ...] = tuple(PACKAGES), *, kueue: bool = False) -> dict[str, Path]:
    """The binaries by name (the control plane's, or those of ``names``, and Kueue's with
    ``kueue``), built first where missing."""
    wanted = _wanted(names, kueue)
    if all(path.exists() for path in wanted.values()):
        return wanted
    go = go_binary()
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building them: wait, then use them
        for name, path in wanted.items():
            if path.exists():
                continue
            if name == "kueue":
                _build(go, ["install", "-trimpath", "-ldflags", "-s -w",
                            f"sigs.k8s.io/kueue/cmd/kueue@{KUEUE_VERSION}"], path, name)
            else:
                _build(go, ["build", "-trimpath", "-ldflags",
                            version_flags(kubernetes_version()), PACKAGES[name]], path, name)
    return wanted


def missing(*, kueue: bool = False) -> list[str]:
    """The binaries not built yet (``ensure`` would build them)."""
    return [name for name, path in _wanted(tuple(PACKAGES), kueue).items() if not path.exists()]


def _wanted(names: tuple[str, ...], kueue: bool) -> dict[str, Path]:
    wanted = {name: kube_dir() / name for name in names}
    if kueue:
        wanted["kueue"] = kueue_path()
    return wanted


if __name__ == "__main__":
    if "--check" in sys.argv:  # exit 1 naming what is not built yet; build nothing
        left = missing(kueue="--kueue" in sys.argv)
        print(" ".join(left))
        sys.exit(1 if left else 0)
    try:
        for name, path in ensure(kueue="--kueue" in sys.argv).items():
            print(f"{name}\t{path}")
    except BuildError as exc:
        sys.exit(f"real_kube: {exc}")

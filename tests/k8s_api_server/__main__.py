"""``python -m tests.k8s_api_server --port 8001 [--kubeconfig PATH] [--kubelet process]``:
serve until Ctrl-C, with the controller moving pods to Running by themselves (scripted), or
running them for real on this machine (``--kubelet process``, as root)."""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

from .config import Settings
from .server import FakeKubernetes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s_api_server",
                                     description="A fake Kubernetes API server for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--kubeconfig", type=Path, default=Path("var/fake-k8s/kubeconfig"))
    parser.add_argument("--kubernetes-version", default=Settings.kubernetes_version)
    parser.add_argument("--pod-start-seconds", type=float, default=1.0,
                        help="how long scripted pods stay ContainerCreating (default: 1)")
    parser.add_argument("--kubelet", choices=("scripted", "process"), default="scripted",
                        help="scripted: pods pretend to run; process: they run on this "
                             "machine, in network namespaces of their own (needs root)")
    parser.add_argument("--addons", default="",
                        help="comma-separated add-ons to install: kueue, volcano")
    args = parser.parse_args(argv)
    settings = Settings(kubernetes_version=args.kubernetes_version,
                        pod_start_seconds=args.pod_start_seconds,
                        addons=tuple(a for a in args.addons.split(",") if a))
    server = FakeKubernetes(host=args.host, port=args.port, settings=settings,
                            kubeconfig_path=args.kubeconfig.resolve(),
                            kubelet=args.kubelet).start()
    print(f"fake Kubernetes API server: {server.url}", flush=True)
    print(f"kubeconfig: {server.kubeconfig_path}", flush=True)
    print(f"try: kubectl --kubeconfig {server.kubeconfig_path} get ns", flush=True)
    for signum in (signal.SIGINT, signal.SIGTERM):  # both end the server like Ctrl-C, even
        signal.signal(signum, signal.default_int_handler)  # when started in the background
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup
    server.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()

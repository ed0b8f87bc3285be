"""``python -m tests.real_kube up [--kueue]|down|status [--dir D]``: the control plane of
control_plane.py (with ``--kueue``, Kueue installed on it: kueue.py), started in the
background (it outlives this command), stopped, or shown. The state directory is var/kube/ of
the checkout unless --dir names another."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.real_kube import build, control_plane, kueue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.real_kube")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, default=control_plane.DEFAULT_DIR,
                        help="the state directory (default: %(default)s)")
    parser.add_argument("--kueue", action="store_true",
                        help=f"up: install Kueue {kueue.KUEUE_VERSION} and run its manager too")
    args = parser.parse_args(argv)
    state_dir = args.dir.resolve()
    if args.command == "up":
        started = time.monotonic()
        if control_plane.is_up(state_dir):
            print(f"real_kube: already up in {state_dir}", file=sys.stderr)
        try:
            cluster = control_plane.up(state_dir)
            if args.kueue:
                kueue.up(cluster).api.close()
        except (build.BuildError, control_plane.ControlPlaneError, RuntimeError) as exc:
            print(f"real_kube: {exc}", file=sys.stderr)
            return 1
        print(f"real_kube: up in {time.monotonic() - started:.1f} s at {cluster.url}; "
              f"logs in {state_dir / 'logs'}", file=sys.stderr)
        print(f"real_kube: the portal's ServiceAccount: {cluster.portal_kubeconfig}",
              file=sys.stderr)
        print(cluster.admin_kubeconfig)
    elif args.command == "down":
        stopped = control_plane.down(state_dir)
        print(f"real_kube: stopped {', '.join(stopped) or 'nothing (none was running)'}",
              file=sys.stderr)
    else:
        running = control_plane.status(state_dir)
        for name in control_plane.COMPONENTS:
            pid = running.get(name)
            if name in control_plane.OPTIONAL and not pid:
                state = "not started (up --kueue starts it)"
            elif name == "node" and not control_plane.node_available():
                state = f"none ({control_plane.NODE_MODULE} is not in this checkout)"
            else:
                state = f"running (pid {pid})" if pid else "not running"
            print(f"{name:<24} {state}")
        if not control_plane.is_up(state_dir):
            return 1
        print(f"admin kubeconfig: {state_dir / 'admin.kubeconfig'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

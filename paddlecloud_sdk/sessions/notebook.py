"""A notebook session: JupyterLab (from PyPI: ``jupyterlab`` 4.6; in the portal's Python on the
local backend, in the session's image on Kubernetes), its root the owner's home
(``PADDLE_PFS_HOME``), on the replica's loopback at ``session_port()``, asking
``session_token()`` of every request (the portal's proxy sends it). Its kernels get
``PADDLE_NOTEBOOK=YES`` and a client config of their owner's, so ``PaddleJob(…).submit()`` and
``dist_train`` submit jobs from it. It replaces this process (its signals are the server's:
a stop is a clean shutdown)."""

from __future__ import annotations

import importlib.util
import os
import sys

from . import LaunchError, private_dir, server_env, session_port, session_token


def command(port: int, root: str) -> list[str]:
    """The server's command line (no secret on it: the token is in its environment)."""
    return [sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
            # Reached only through the portal's proxy, at an origin of the session's own
            # (whose Host and Origin the server cannot know): the proxy checks who comes.
            "--ServerApp.allow_remote_access=True", "--ServerApp.allow_origin=*",
            "--ServerApp.trust_xheaders=False",
            # Nothing fetched from outside (the job's network may reach nothing).
            "--LabApp.news_url=", "--LabApp.check_for_updates_class="
            "jupyterlab.handlers.announcements.NeverCheckForUpdate",
            # Root only where the replica runs as the portal's user, unsandboxed (a local
            # backend without bubblewrap): its own choice, nothing more.
            *(["--allow-root"] if os.geteuid() == 0 else [])]


def main(args: list[str]) -> int:
    if args:
        raise LaunchError(f"a notebook takes no arguments, not {' '.join(args)}")
    if importlib.util.find_spec("jupyterlab") is None:
        raise LaunchError("JupyterLab is not installed in this image: start the notebook "
                          "with -image naming one that has it (pip install 'jupyterlab>=4.6,"
                          "<4.7')")
    token = session_token()
    root = os.environ.get("PADDLE_PFS_HOME") or os.path.expanduser("~")
    where = private_dir()
    env = server_env(where)
    env["JUPYTER_TOKEN"] = token
    env["JUPYTER_RUNTIME_DIR"] = str(where / "runtime")
    sys.stdout.flush()
    os.chdir(root)  # its kernels and terminals start in the home too, not in the package
    os.execve(sys.executable, command(session_port(), root),  # noqa: S606
              env)
    return 0  # not reached

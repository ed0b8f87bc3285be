"""Following a runtime image's builder (``builder``) on the cluster until it ends: its pod's
log copied to the build's log as it comes, the digest it pushed read from its termination
message, and a failure told in one line (the builder's last lines, or why its pod failed).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from ..base import BackendError
from . import builder
from .client import KubeError
from .observe import PULL_FAILURES, container

logger = logging.getLogger(__name__)

LAST_LINES = 15  # of a failed builder's log kept for its reason (``Tail.said``)


def build_follow(kube, build, namespace: str, image: str, log: int, *,
                 cancelled: Callable[[], str]) -> str:
    """Follow ``build``'s builder (of ``image``) in ``namespace`` until it ends, copying its
    log to the file descriptor ``log``. Returns the digest it pushed; ``BackendError`` saying
    why it failed, or ``BuildCancelled`` once ``cancelled()`` (asked between looks) says why
    the build was cancelled."""
    selector = f"{builder.BUILD_LABEL}={build.uid}"
    deadline = time.monotonic() + builder.BUILD_SECONDS + 60
    tail = Tail(LAST_LINES)
    copied = False
    while time.monotonic() < deadline:
        if why := cancelled():
            raise BuildCancelled(why)
        try:
            found, _ = kube.list("Pod", namespace, selector=selector)
        except KubeError as exc:
            logger.warning("listing the builder pod of %s: %s", build.image, exc)
            found = []
        pod = found[-1] if found else None
        status = container((pod or {}).get("status", {}).get("containerStatuses"),
                           builder.CONTAINER)
        state = status.get("state") or {}
        waiting = (state.get("waiting") or {})
        if waiting.get("reason") in PULL_FAILURES:
            raise BackendError(f"the builder image {image} cannot be pulled: "
                               f"{waiting.get('message') or waiting['reason']}")
        if pod is not None and not copied and ("running" in state or "terminated" in state):
            try:
                for chunk in kube.pod_log(namespace, pod["metadata"]["name"],
                                          container=builder.CONTAINER, follow=True):
                    os.write(log, chunk)
                    tail.add(chunk)
                copied = True
            except KubeError as exc:
                if exc.status not in (400, 404):
                    raise BackendError(f"reading the builder's log: {exc}") from None
            continue
        if "terminated" in state:
            ended = state["terminated"]
            if ended.get("exitCode") == 0:
                digest = builder.pushed_digest(ended.get("message", ""))
                if digest is None:
                    raise BackendError("the builder ended without saying what it pushed")
                return digest
            raise BackendError(f"the builder failed (exit {ended.get('exitCode')}): "
                               f"{tail.said() or ended.get('reason', '')}")
        if pod is not None and pod["status"].get("phase") == "Failed":
            raise BackendError(f"the builder's pod failed: "
                               f"{pod['status'].get('message') or pod['status'].get('reason')}")
        time.sleep(1)
    raise BackendError(f"the builder did not finish within {builder.BUILD_SECONDS} s")


class BuildCancelled(Exception):
    """The build was cancelled while its builder ran (why, as its message): the caller
    deletes the builder."""


class Tail:
    """The last lines of what a builder printed, for the reason of its failure."""

    def __init__(self, lines: int):
        self.lines, self.kept = lines, b""

    def add(self, chunk: bytes) -> None:
        self.kept = b"\n".join((self.kept + chunk).split(b"\n")[-self.lines - 1:])

    def said(self) -> str:
        """Its last lines as one: those saying what went wrong (pip's "ERROR: …", BuildKit's
        "error: …"), else the last three, joined by " / "."""
        lines = [line.strip() for line in self.kept.decode(errors="replace").splitlines()
                 if line.strip()]
        errors = [line for line in lines if "error" in line.lower()]
        return " / ".join((errors or lines)[-3:])

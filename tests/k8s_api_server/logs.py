"""Container logs, kept per pod uid and container, the current run and the previous one
(what ``previous=true`` reads after a restart). Appends wake followers through the
store's condition."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field

from .errors import bad_request
from .resources import PODS


@dataclass
class ContainerLog:
    current: list[tuple[float, str]] = field(default_factory=list)  # (epoch seconds, line)
    previous: list[tuple[float, str]] = field(default_factory=list)


class LogStore:
    def __init__(self, store):
        self.store = store
        self._logs: dict[tuple[str, str], ContainerLog] = {}
        # What pods that are gone printed, with their metadata: a real pod of the portal's
        # leaves its log in the job's output, a scripted one only here (``gone``).
        self._gone: list[tuple[dict, str, list[tuple[float, str]]]] = []

    def append(self, pod_uid: str, container: str, lines: list[str]) -> None:
        with self.store.lock:
            log = self._logs.setdefault((pod_uid, container), ContainerLog())
            for line in lines:
                log.current.append((time.time(), line))
            self.store.notify()

    def restart(self, pod_uid: str, container: str) -> None:
        """A restarted container starts an empty log; the last run becomes ``previous``."""
        with self.store.lock:
            log = self._logs.setdefault((pod_uid, container), ContainerLog())
            log.previous, log.current = log.current, []

    def lines(self, pod_uid: str, container: str, *, previous: bool = False
              ) -> list[tuple[float, str]]:
        with self.store.lock:
            log = self._logs.get((pod_uid, container), ContainerLog())
            return list(log.previous if previous else log.current)

    def forget(self, pod_uid: str, metadata: dict | None = None) -> None:
        """The pod is gone: the API serves its logs no more. With its ``metadata``, what it
        printed is kept for ``gone``."""
        with self.store.lock:
            for key in [k for k in self._logs if k[0] == pod_uid]:
                if metadata is not None:
                    self._gone.append((metadata, key[1], self._logs[key].current))
                del self._logs[key]

    def gone(self, container: str) -> list[dict]:
        """Pods that are gone, oldest first, as ``{"metadata": …, "log": …}``: ``log`` what
        their ``container`` printed in its last run."""
        with self.store.lock:
            return [{"metadata": meta, "log": "".join(f"{line}\n" for _, line in lines)}
                    for meta, name, lines in self._gone if name == container]


def container_state(pod: dict, container: str) -> dict | None:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses")
                                                             or []):
        if entry["name"] == container:
            return entry
    return None


def pick_container(pod: dict, requested: str | None) -> str:
    """The container a log request means; 400 as the server words it when ambiguous."""
    spec, name = pod["spec"], pod["metadata"]["name"]
    names = [c["name"] for c in spec.get("containers") or []]
    init_names = [c["name"] for c in spec.get("initContainers") or []]
    if not requested:
        if len(names) == 1:
            return names[0]
        message = f"a container name must be specified for pod {name}, choose one of: " \
                  f"[{' '.join(names)}]"
        if init_names:
            message += f" or one of the init containers: [{' '.join(init_names)}]"
        raise bad_request(message)
    if requested not in names + init_names:
        raise bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def log_run(pod: dict, container: str, previous: bool) -> str | None:
    """Which run's log the kubelet serves ("current" or "previous"), None for an empty answer
    (pod not scheduled yet), or the kubelet's 400 while the container cannot have logs."""
    if not pod["spec"].get("nodeName"):
        return None
    pod_name, state = pod["metadata"]["name"], container_state(pod, container)
    if state is None:
        raise bad_request(f'container "{container}" in pod "{pod_name}" is not available')
    current, last = state.get("state") or {}, state.get("lastState") or {}
    if previous:
        if "terminated" not in last:
            raise bad_request(f'previous terminated container "{container}" in pod '
                               f'"{pod_name}" not found')
        return "previous"
    if "running" in current or "terminated" in current:
        return "current"
    if "terminated" in last:
        return "previous"
    reason = (current.get("waiting") or {}).get("reason", "ContainerCreating")
    why = {"ErrImagePull": "image can't be pulled",
           "ImagePullBackOff": "trying and failing to pull image"}.get(reason, reason)
    raise bad_request(f'container "{container}" in pod "{pod_name}" is waiting to start: {why}')


def answer(store, log_store, pod: dict, query: dict, dropped):
    """A log request for ``pod`` (held by ``store``) as the kubelet answers it: (the lines so
    far, rendered by ``query``; None, or when the container is followed, asked and running,
    an iterator of the chunks it prints next, until this run of it stops or the pod goes).
    ``dropped()`` true ends the iterator early, raising ``FollowDropped``."""
    container = pick_container(pod, query.get("container"))
    run = log_run(pod, container, query.get("previous") in ("true", "1"))
    if run is None:
        return b"", None
    lines = log_store.lines(pod["metadata"]["uid"], container, previous=run == "previous")
    follow = run == "current" and query.get("follow") in ("true", "1") and \
        container_id(pod, container) is not None and running(pod, container)
    return render(lines, query), _follow(store, log_store, pod, container, len(lines), query,
                                         dropped) if follow else None


def _follow(store, log_store, pod: dict, container: str, count: int, query: dict, dropped):
    uid, run_id = pod["metadata"]["uid"], container_id(pod, container)
    stamps = {"timestamps": query.get("timestamps", "")}
    while True:
        with store.lock:
            if dropped():
                raise FollowDropped
            now = store.get(PODS.key, pod["metadata"]["namespace"], pod["metadata"]["name"])
            same_run = bool(now) and now["metadata"]["uid"] == uid and \
                container_id(now, container) == run_id
            lines = log_store.lines(uid, container, previous=not same_run)
            finished = not same_run or not running(now, container)
            if len(lines) == count and not finished:
                store.changed.wait(0.5)
                continue
        if lines[count:]:
            yield render(lines[count:], stamps)
            count = len(lines)
        if finished:
            return


class FollowDropped(Exception):
    """A followed log's stream was cut on purpose (the server stops, or a test drops it)."""


def container_id(pod: dict, container: str) -> str | None:
    entry = container_state(pod, container)
    return entry.get("containerID") if entry else None


def running(pod: dict, container: str) -> bool:
    entry = container_state(pod, container)
    return bool(entry) and "running" in (entry.get("state") or {})


def render(lines: list[tuple[float, str]], query: dict) -> bytes:
    """Apply sinceSeconds, tailLines, timestamps and limitBytes to log lines."""
    if query.get("sinceSeconds"):
        cutoff = time.time() - float(query["sinceSeconds"])
        lines = [entry for entry in lines if entry[0] >= cutoff]
    if query.get("tailLines") not in (None, ""):
        tail = int(query["tailLines"])
        lines = lines[-tail:] if tail > 0 else []
    stamped = query.get("timestamps") in ("true", "1")
    text = "".join(f"{_rfc3339_nano(at)} {line}\n" if stamped else f"{line}\n"
                   for at, line in lines)
    data = text.encode()
    if query.get("limitBytes"):
        data = data[:int(query["limitBytes"])]
    return data


def _rfc3339_nano(at: float) -> str:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")

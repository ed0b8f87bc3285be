"""What an execution backend must do. ``local`` and ``kubernetes`` implement it; the services
and tasks use nothing else, and the same contract tests run against both."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from paddlecloud_core.contract import Paths, Topology
from paddlecloud_core.status import Observation, Status

__all__ = ["Backend", "BackendError", "Capacity", "Observation", "PortStream", "StartProgress",
           "Status"]


class BackendError(Exception):
    """The backend could not do what was asked; the message says why, for the job's events."""


@dataclass(frozen=True)
class Capacity:
    """What a cluster offers jobs, all together: as a datacenter's ``capacity_*`` count it."""

    cpu: int  # millicores
    memory: int  # bytes
    gpu: int


@dataclass(frozen=True)
class StartProgress:
    """A starting job's start goes on from ``since``, though its replicas do not all run
    yet: the cluster's own queue admitted it then, or one of its pods makes progress now
    (``why``, in words for the user, for the job's reason; "" to leave it as it is)."""

    since: datetime
    why: str


class PortStream(Protocol):
    """A byte stream to one port of a replica (``Backend.port_open``), both ways. A stream may
    also have ``at_eof() -> bool`` (the other side closed and all it sent was read): the
    proxy then never sends a request on a kept connection the app has closed meanwhile
    (without it, a request without a body is sent again once on a new connection)."""

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes, as they come; b"" once the other side has closed."""

    async def write(self, data: bytes) -> None:
        """All of ``data`` sent (waits while the other side is slow to read)."""

    async def close(self) -> None:
        """The connection closed (both ways); again: nothing."""


class Backend(abc.ABC):
    name: str  # as the registry names it (``jobs.backends``), set by ``backend_for``
    # Where every replica runs, known before it starts (the local backend: this machine),
    # saved with its endpoint; "": each observation says (its node on Kubernetes).
    placed_host = ""

    @abc.abstractmethod
    def prepare(self, job, attempt: int = 0) -> None:
        """Make what the job's replicas need ready (package, requirements, objects), its
        trainers starting at ``attempt`` (a requeued job's next start begins a new one); its
        output directory is the engine's (``jobs.engine.job_prepare``). Idempotent.
        Raises BackendError with a message for the user when that fails."""

    def pfs_mounted(self, datacenter) -> bool:
        """Whether the portal has the datacenter's PFS as a directory of its own, where it
        makes a job's output before ``prepare`` (always where jobs run on this machine)."""
        return True

    @abc.abstractmethod
    def paths(self, job) -> Paths:
        """The job's output dir, the owner's PFS home and the public dir, as replicas see them
        (real directories on the local backend; the mounts /pfs/{dc}/… on Kubernetes)."""

    @abc.abstractmethod
    def topology(self, job, replicas) -> Topology:
        """Each replica's endpoint: those the replicas have kept, the rest given now (the
        engine saves them on the replicas: ``jobs.engine.job_topology``). The same on every
        call once saved."""

    @abc.abstractmethod
    def start(self, job, replica, env: dict[str, str]) -> str:
        """Start attempt ``replica.attempt`` of the replica, unless it was started already
        (then return the same reference). Returns the backend's handle for it."""

    def datacenter_check(self, datacenter) -> str:
        """Whether the datacenter can run jobs on this backend (e.g. its cluster is recent
        enough): what was found, for the admin, or ``BackendError`` saying what is wrong."""
        return ""

    def capacity(self, datacenter) -> Capacity | None:
        """What the datacenter's cluster offers jobs now (a datacenter whose capacity comes
        from its cluster), or None where the backend cannot tell (the local backend);
        ``BackendError`` if it cannot be asked."""
        return None

    def release(self, job) -> None:  # noqa: B027 - optional: most backends hold nothing
        """The job has ended (its replicas are stopped): let go of what the backend held for
        it while it ran (the local backend: its network). Its files stay until ``cleanup``."""

    @abc.abstractmethod
    def observe(self, job, replica) -> Observation:
        """What has become of the replica's current attempt. ``NOT_STARTED`` only where
        replicas start one by one (local); on Kubernetes ``prepare`` makes the controllers
        that start every pod, so a prepared replica is already waiting or running."""

    def observe_all(self, datacenter, replicas) -> dict[int, Observation | None]:
        """What became of each of the datacenter's ``replicas`` (each with its ``job``), by
        replica id, as cheaply as the backend can tell: the reconciler looks at every running
        replica with it. None where it cannot tell without a closer look (``observe``)."""
        return {replica.pk: self.observe(replica.job, replica) for replica in replicas}

    def start_progress(self, job, replicas) -> StartProgress | None:
        """Asked when the job's start timeout has passed by the portal's clock, with its
        ``replicas`` that do not run yet: whether its start began later than the portal knew
        (a queue of the cluster's admitted it then) or still goes on (what its pods wait for
        is under way, not stuck). None where the backend sees neither: the start timed out."""
        return None

    def changes_watch(self, datacenter) -> None:  # noqa: B027 - where a feed must be started
        """Start the datacenter's change feed in this process, if it has one to start (once;
        again after it stopped): from then on, whatever becomes of a job's replicas there is
        announced (``signals.replicas_changed``). The local backend's feed needs no start:
        each runner is followed by the process that starts it."""

    @abc.abstractmethod
    def stop(self, job, replicas, grace: float) -> None:
        """Stop the replicas: a polite signal, then a forced one after ``grace`` seconds."""

    def trainer_first_attempt(self, job, trainers) -> int:
        """The attempt a trainer added to a running job begins with (an elastic job's new
        trainer, past the indexes it was submitted with): what tells its runs apart from
        others'. ``trainers`` are the job's trainers so far."""
        return max((r.attempt for r in trainers), default=0)

    def stop_for_restart(self, job, replicas, grace: float) -> None:
        """Stop the replicas because they restart together (a collective job's trainers): as
        ``stop``, but the job goes on, with what it holds; ``start`` starts each again."""
        self.stop(job, replicas, grace)

    def objects(self, job, quota=None) -> list[dict]:
        """What the backend would create for the (unsaved) job, for dry runs; raises
        ``kernel.errors.ValidationError`` when that would be refused. Nothing on a
        backend with no objects of its own."""
        return []

    def log_stream(self, job, replica, *, follow: bool, tail: int | None,
                   ended: Callable[[], bool] | None = None, at=None):
        """The replica's log from where it runs, as (where it begins: a
        ``paddlecloud_core.logcursor.LogCursor`` naming the run, None if it cannot be said;
        an iterator of bytes), from ``at`` (a cursor such an answer gave, advanced); or None
        when it is read from its file in the output (``jobs.files.log_file``: the local
        backend; pods that are gone; a cursor naming a run the backend no longer has).
        ``ended()`` says whether the replica has ended, for a log followed before it has begun
        (None: as if it had)."""
        return None

    @abc.abstractmethod
    def orphans_stop(self, datacenters, known: Callable[[set[str]], set[str]],
                     grace: float) -> int:
        """Stop and remove whatever the backend runs or keeps for jobs the database no longer
        knows, in ``datacenters`` (those on this backend): ``known(uids)`` says which of the
        job uids it found the database knows (one query for all, so the cost is what the
        backend holds, not the jobs ever run). Returns how many unknown jobs it found."""

    @abc.abstractmethod
    def cleanup(self, job) -> None:
        """Remove what the backend keeps for the job privately (not its output)."""

    # Runtime images (``jobs.builds``).

    runs_images = False  # replicas run in the job's image, which a build registry lets build

    def image_build(self, build, dockerfile: str, log: int, auth: tuple[str, str] | None, *,
                    insecure: bool, cancelled: Callable[[], str] = lambda: "") -> str:
        """Build ``build``'s runtime image (``dockerfile`` is its text; the package
        ``build.package`` its context) and push it to ``build.image`` with ``auth`` (user name
        and password; None: anonymously; ``insecure``: over plain HTTP). Returns the pushed
        manifest's digest. The builder's output goes to the file descriptor ``log``;
        ``BackendError`` with a one-line reason (the builder's last lines, or the registry's
        refusal) if it fails. A backend that follows its builder asks ``cancelled()`` as it
        does (the reason, once the build was cancelled; "" until then), and once it answers
        stops the builder and fails with that reason."""
        raise BackendError(f"datacenter {build.datacenter.name}'s backend cannot build images")

    async def port_open(self, job, replica, port: int) -> PortStream:
        """A connection to ``port`` on the replica's own loopback (its network namespace, its
        pod's network), made from the portal: the proxy's, port-forward's way in.
        ``BackendError`` (a clear message for the user) when the replica is not running or
        nothing listens there."""
        raise BackendError(f"the {self.name} backend cannot reach a replica's port")

    def image_build_problem(self, datacenter) -> str | None:
        """Why the datacenter cannot build images now (for the user), or None."""
        return None

    def image_build_cancel(self, build) -> None:  # noqa: B027 - where builds can be stopped
        """Stop the builder of a build that was cancelled (``Build.CANCELLED``) while it runs;
        done if it has ended. Its ``image_build`` then fails."""

    # Registry credentials. Only a backend that pulls images needs them (Kubernetes keeps one
    # pull secret per credential in the owner's namespace); on the others these do nothing.

    def pull_secret_apply(self, registry) -> None:  # noqa: B027 (optional: no-op by default)
        """Create or update the pull secret of ``registry`` (a registries.Registry)."""

    def pull_secret_delete(self, datacenter, owner, name: str) -> None:  # noqa: B027
        """Remove the pull secret of the owner's credential ``name``; done if it is gone."""


class Records(abc.ABC):
    """What a backend reads and writes of the portal's records. A backend imports no record
    (the ``backends-records`` contract): the jobs app gives it these when Django starts
    (``jobs.backend_records``, set by ``jobs.apps``), and a backend asks ``records()``."""

    @abc.abstractmethod
    def quota(self, user, datacenter):
        """The user's effective quota in the datacenter (what the namespace's ResourceQuota
        states)."""

    @abc.abstractmethod
    def registry_password(self, registry) -> str:
        """A registry credential's password, decrypted (what its pull secret holds)."""

    @abc.abstractmethod
    def environment_use(self, job, digest: str) -> None:
        """Record that ``job`` uses the environment ``digest`` (before it looks for it: no
        eviction takes an environment a live job has recorded)."""

    @abc.abstractmethod
    def environment_in_use(self, digest: str) -> bool:
        """Whether a job not yet ended uses the environment ``digest``."""

    @abc.abstractmethod
    def event(self, job, reason: str) -> None:
        """A line in the job's events, its state unchanged (what its environment's build did)."""


_records: Records | None = None


def records_set(given: Records) -> None:
    global _records
    _records = given


def records() -> Records:
    if _records is None:
        raise RuntimeError("the backends' records are not set: jobs.apps sets them when Django "
                           "starts")
    return _records

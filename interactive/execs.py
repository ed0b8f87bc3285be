"""A command in a running job's worker (``paddlectl exec``, the job page's terminal): who may
run one, in which worker, and the audit entry every one leaves. The command itself is the
backend's (``Backend.exec_open``); its bytes go through ``exec_consumer``."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from accounts.audit import audit_record
from accounts.models import AuditEntry
from jobs import services as job_services
from jobs.models import Job, Replica
from jobs.states import JobState, ReplicaState
from kernel.errors import ConflictError, NotFoundError, ValidationError

COMMAND_WORDS = 256  # the most a command line may have, and the bytes of all of them
COMMAND_BYTES = 16384
SIZE_MAX = 1000  # a terminal's columns and rows
AUDITED_CHARS = 1000  # a command as the audit entry keeps it


def exec_job(user, datacenter, name: str, *, owner: str | None = None) -> Job:
    """The job ``name`` a command may run in: the user's own, or, for an admin, the job of
    ``owner``. Anyone else's is not found, as a job that does not exist."""
    if owner and owner != user.username:
        if not user.is_staff:
            raise NotFoundError(f"you have no job named {name!r} in datacenter "
                                f"{datacenter.name!r}")
        target = get_user_model().objects.filter(username=owner).first()
        if target is None:
            raise NotFoundError(f"user {owner!r} has no job named {name!r} in datacenter "
                                f"{datacenter.name!r}")
        return job_services.job_get(target, datacenter, name)
    return job_services.job_get(user, datacenter, name)


def exec_worker(job: Job, worker: str | None) -> Replica:
    """The running worker of the running job a command runs in (its first trainer by
    default); a clear error when either is not running."""
    if job.state != JobState.RUNNING:
        raise ConflictError(f"job {job.name!r} is {job.state}: a command runs only in a "
                            "running job", code="job_not_running")
    replica = job_services.job_worker(job, worker, building=False)
    if not isinstance(replica, Replica):
        raise ValidationError.for_field("worker", "a command runs in a trainer or a pserver, "
                                                  "not in the image's build")
    if replica.state != ReplicaState.RUNNING:
        raise ConflictError(f"worker {replica.name} of job {job.name!r} is {replica.state}: "
                            "a command runs only in a running worker", code="worker_not_running")
    return replica


def exec_command(message: dict) -> tuple[list[str], bool, tuple[int, int] | None, str]:
    """The command, whether it gets a terminal, the terminal's size and its TERM, from the
    client's start message; a ValidationError naming the field otherwise."""
    command = message.get("command")
    if (not isinstance(command, list) or not command
            or not all(isinstance(word, str) for word in command)):
        raise ValidationError.for_field("command", "a list of words, the program first "
                                                   '(e.g. ["bash"])')
    if not command[0] or len(command) > COMMAND_WORDS \
            or sum(len(word.encode()) for word in command) > COMMAND_BYTES:
        raise ValidationError.for_field("command", f"a program, and at most {COMMAND_WORDS} "
                                                   f"words of {COMMAND_BYTES} bytes in all")
    if any("\0" in word for word in command):
        raise ValidationError.for_field("command", "no word may hold a NUL character")
    tty = message.get("tty", False)
    if not isinstance(tty, bool):
        raise ValidationError.for_field("tty", "true or false")
    size = None
    if tty and ("cols" in message or "rows" in message):
        size = (exec_size(message, "cols"), exec_size(message, "rows"))
    term = message.get("term") or "xterm"
    if not isinstance(term, str) or not term.replace("-", "").replace(".", "").isalnum() \
            or len(term) > 64:
        raise ValidationError.for_field("term", "a terminal type such as xterm-256color")
    return command, tty, size, term


def exec_size(message: dict, field: str) -> int:
    value = message.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= SIZE_MAX:
        raise ValidationError.for_field(field, f"a whole number from 1 to {SIZE_MAX}")
    return value


def exec_audit(user, job: Job, replica: Replica, command: list[str], *, tty: bool) -> None:
    """The audit entry of a command run in a job's worker: who, whose job, which worker and
    the command (cut to ``AUDITED_CHARS``)."""
    shown = " ".join(command)
    if len(shown) > AUDITED_CHARS:
        shown = shown[:AUDITED_CHARS] + "…"
    audit_record(user, AuditEntry.Action.JOB_EXEC, f"{job.owner.username}/{job.name}",
                 datacenter=job.datacenter, whose=job.owner, worker=replica.name,
                 command=shown, tty=tty)

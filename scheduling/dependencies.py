"""Jobs that run after others (``after``; docs/users/jobs.md, "Run after another job").

A job submitted with ``after`` gets an edge (``jobs.models.JobDependency``) to each job it
names, recorded in the submission's transaction with those jobs' rows locked, so one that
ends meanwhile is either seen ended here or finds the edge when it ends. Until every edge is
met the job is in no queue: admission leaves it out (``UNMET``), holding nothing, with the
reason ``paddlecloud_core.scheduling.after_words`` gives, and the forecast starts it once
those jobs have ended (``waiting_after``).

``job_ended_settle`` is the one place where a job's end reaches the jobs that run after it:
each edge it ended as asked is met (admission of the owner's queue follows the end anyway),
each it can no longer meet fails its job, with the reason — and that job's end settles the
jobs after it in turn, so a chain fails through.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Exists, OuterRef

from jobs.models import Job, JobDependency
from jobs.spec import after_targets
from jobs.states import FINAL_JOB_STATES, WAITING_STATES, JobState
from jobs.transitions import jobs_transition
from kernel.errors import ValidationError
from paddlecloud_core.scheduling import after_outcome, after_words

# Waiting jobs that still wait for a job they run after: in no queue yet.
UNMET = Exists(JobDependency.objects.filter(job=OuterRef("pk"), met=False))
# How a dependency's end that fails the jobs after it is told.
ENDED_WORDS = {JobState.FAILED: "failed", JobState.KILLED: "was killed"}


def dependencies_record(job: Job) -> None:
    """Record the edges of a job just created with ``after`` (in its submission's
    transaction); a job named that has ended otherwise than asked since the submission was
    checked refuses it (naming the field)."""
    if not job.after:
        return
    try:
        targets = after_targets(job.owner, job.datacenter, job.after, lock=True)
    except ValueError as exc:
        raise ValidationError.for_field("after", str(exc)) from None
    JobDependency.objects.bulk_create(
        JobDependency(job=job, on=other, on_name=other.name, mode=mode, met=met)
        for other, mode, met in targets)


def dependency_reasons(owner_ids: Iterable[int], datacenter_id: int) -> dict[int, str]:
    """Why each of the owners' waiting jobs in the datacenter that waits for jobs it runs
    after waits (``after_words``), by id (one query)."""
    unmet: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for job_id, name, mode in (JobDependency.objects
                               .filter(met=False, job__owner_id__in=list(owner_ids),
                                       job__datacenter_id=datacenter_id,
                                       job__state__in=WAITING_STATES)
                               .order_by("id").values_list("job_id", "on_name", "mode")):
        unmet[job_id].append((name, mode))
    return {job_id: after_words(pairs) for job_id, pairs in unmet.items()}


def waiting_after(jobs: Iterable[Job]) -> dict[int, tuple[tuple[int, str, str], ...]]:
    """What each of these waiting jobs still waits for, as ``Waiting.after`` holds it: (id,
    name, mode) of each job it runs after that has not yet ended as asked; by id (0: a job
    not yet submitted, a dry run's, read from its ``after``). One query for the saved ones."""
    jobs = list(jobs)
    after: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for job_id, on_id, name, mode in (JobDependency.objects
                                      .filter(job_id__in=[j.pk for j in jobs if j.pk],
                                              met=False)
                                      .order_by("id")
                                      .values_list("job_id", "on_id", "on_name", "mode")):
        after[job_id].append((on_id or 0, name, mode))
    for job in jobs:
        if not job.pk and job.after:  # checked already: the submission's own rules
            after[0] = [(other.pk, other.name, mode) for other, mode, met
                        in after_targets(job.owner, job.datacenter, job.after) if not met]
    return {job_id: tuple(edges) for job_id, edges in after.items() if edges}


def job_ended_settle(sender, job_ids: list[int], **kwargs) -> None:
    """Jobs ended (``jobs.signals.job_ended``, inside the transaction that ended them): the
    edges to them that they ended as asked are met; the jobs whose edge can no longer be
    (it asked for a success) fail, with the reason."""
    edges = list(JobDependency.objects.filter(on_id__in=job_ids, met=False)
                 .select_related("on").only("id", "job_id", "mode", "on_name", "on__state"))
    met, doomed = [], {}
    for edge in edges:
        outcome = after_outcome(edge.mode, edge.on.state)
        if outcome:
            met.append(edge.pk)
        elif outcome is False:
            doomed.setdefault(edge.job_id, f"dependency {edge.on_name} "
                                            f"{ENDED_WORDS[edge.on.state]}")
    if met:
        JobDependency.objects.filter(pk__in=met).update(met=True)
    if doomed:
        jobs = list(Job.objects.filter(pk__in=list(doomed))
                    .exclude(state__in=FINAL_JOB_STATES).only("id", "state"))
        jobs_transition(jobs, JobState.FAILED, {job.pk: doomed[job.pk] for job in jobs})

"""The usage ledger filled from the jobs still in history: each run of a replica, read from
its recorded events as budgets read them until now (a run goes from an event into
``starting`` or ``running`` to the next into another state; one with no end runs still).
Use of jobs deleted before this migration was not recorded anywhere and cannot be."""

from itertools import groupby

from django.db import migrations

RUNS = ("starting", "running")
BATCH = 2000


def fill(apps, schema_editor):
    from jobs.usage import held  # what a replica holds: one rule, the ledger's

    JobEvent = apps.get_model("jobs", "JobEvent")
    Usage = apps.get_model("jobs", "Usage")
    events = (JobEvent.objects.filter(replica__isnull=False)
              .order_by("replica_id", "time", "id")
              .values_list("replica_id", "replica__role", "replica__index", "to_state", "time",
                           "job_id", "job__name", "job__owner_id", "job__datacenter_id",
                           "job__cpu", "job__pscpu", "job__gpu"))
    rows = []
    for replica_id, replica_events in groupby(events.iterator(chunk_size=BATCH),
                                              key=lambda event: event[0]):
        since, runs = None, 0
        for (_, role, index, state, at, job_id, name, owner_id, datacenter_id, cpu, pscpu,
             gpu) in replica_events:
            if state in RUNS and since is None:
                since = at
                cores, gpus = held(role, cpu, pscpu, gpu)
                rows.append(Usage(owner_id=owner_id, datacenter_id=datacenter_id,
                                  job_key=job_id, job_name=name, replica_key=replica_id,
                                  role=role, index=index, attempt=runs, cpu=cores, gpu=gpus,
                                  started_at=at))
                runs += 1
            elif state not in RUNS and since is not None:
                rows[-1].ended_at = at
                since = None
        if len(rows) >= BATCH:
            Usage.objects.bulk_create(rows)
            rows = []
    Usage.objects.bulk_create(rows)


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0012_usage_ledger"),
    ]

    operations = [
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]

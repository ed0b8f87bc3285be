from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .signals import job_ended, replicas_changed, runs_restarted


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        # The backends offered to datacenters, registered (``jobs.backends``) before anything
        # asks for one; the default a new datacenter gets must be one of them.
        from .backends import BACKENDS

        if settings.PADDLECLOUD_BACKEND not in {kind.name for kind in BACKENDS}:
            raise ImproperlyConfigured(
                f"PADDLECLOUD_BACKEND={settings.PADDLECLOUD_BACKEND!r}: expected "
                + " or ".join(repr(kind.name) for kind in BACKENDS))
        # What the backends read and write of the records, which they import none of.
        from .backend_records import JobRecords
        from .backends.base import records_set

        records_set(JobRecords())
        # Here, not at the top: sync imports the models, which exist once every app is loaded.
        # (What the jobs announce for admission, the scheduling app hears: scheduling.apps.)
        from .sync import replicas_changed_sync

        replicas_changed.connect(replicas_changed_sync, dispatch_uid="jobs.replicas_changed_sync")
        # What a run that restarts lost since its job's last checkpoint (issue 37).
        from .resumes import runs_lost

        runs_restarted.connect(runs_lost, dispatch_uid="jobs.runs_lost")
        # An ended job's metrics parsed for comparing it, by a worker (issue 39).
        from .metrics_cache import job_ended_keep

        job_ended.connect(job_ended_keep, dispatch_uid="jobs.job_ended_keep")
        # The jobs by state and the queues, counted when Prometheus scrapes (once a process).
        from .collector import collector_register

        collector_register()

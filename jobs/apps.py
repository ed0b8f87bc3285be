from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from accounts.signals import quota_changed

from .signals import job_built, job_ended, job_requeued, replicas_changed


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
        # Here, not at the top: admission imports the models, which exist once every app is
        # loaded.
        from .admission import job_ended_admit, job_ended_measure, quota_changed_admit

        quota_changed.connect(quota_changed_admit, dispatch_uid="jobs.quota_changed_admit")
        job_ended.connect(job_ended_admit, dispatch_uid="jobs.job_ended_admit")
        job_ended.connect(job_ended_measure, dispatch_uid="jobs.job_ended_measure")
        # A requeued job is admitted again as ended jobs' queues are: at its place, its
        # first (its submission time is kept).
        job_requeued.connect(job_ended_admit, dispatch_uid="jobs.job_requeued_admit")
        job_built.connect(job_ended_admit, dispatch_uid="jobs.job_built_admit")
        from .sync import replicas_changed_sync

        replicas_changed.connect(replicas_changed_sync, dispatch_uid="jobs.replicas_changed_sync")
        # The jobs by state and the queues, counted when Prometheus scrapes (once a process).
        from .collector import collector_register

        collector_register()

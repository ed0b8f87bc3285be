from django.apps import AppConfig

from accounts.signals import quota_changed
from jobs.signals import job_built, job_ended, job_requeued


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self):
        # Here, not at the top: admission imports the models, which exist once every app is
        # loaded.
        from .admission import job_ended_admit, job_ended_measure, quota_changed_admit
        from .dependencies import job_ended_settle

        quota_changed.connect(quota_changed_admit, dispatch_uid="scheduling.quota_changed_admit")
        # What ended settles the jobs that run after it (in its transaction), before the
        # owner's queue is admitted (after it commits).
        job_ended.connect(job_ended_settle, dispatch_uid="scheduling.job_ended_settle")
        job_ended.connect(job_ended_admit, dispatch_uid="scheduling.job_ended_admit")
        job_ended.connect(job_ended_measure, dispatch_uid="scheduling.job_ended_measure")
        # A requeued job is admitted again as ended jobs' queues are: at its place, its
        # first (its submission time is kept).
        job_requeued.connect(job_ended_admit, dispatch_uid="scheduling.job_requeued_admit")
        job_built.connect(job_ended_admit, dispatch_uid="scheduling.job_built_admit")

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        # Here, not at the top: an app's modules are imported once every app is loaded.
        from accounts.signals import quota_changed

        from .admission import job_ended_admit, quota_changed_admit
        from .signals import job_ended

        quota_changed.connect(quota_changed_admit, dispatch_uid="jobs.quota_changed_admit")
        job_ended.connect(job_ended_admit, dispatch_uid="jobs.job_ended_admit")

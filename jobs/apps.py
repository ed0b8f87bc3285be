from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        from accounts.signals import quota_changed

        from .admission import quota_changed_admit

        quota_changed.connect(quota_changed_admit, dispatch_uid="jobs.quota_changed_admit")

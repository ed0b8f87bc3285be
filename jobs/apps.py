from django.apps import AppConfig

from .signals import replicas_changed


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        # Here, not at the top: sync imports the models, which exist once every app is loaded.
        # (What the jobs announce for admission, the scheduling app hears: scheduling.apps.)
        from .sync import replicas_changed_sync

        replicas_changed.connect(replicas_changed_sync, dispatch_uid="jobs.replicas_changed_sync")
        # The jobs by state and the queues, counted when Prometheus scrapes (once a process).
        from .collector import collector_register

        collector_register()

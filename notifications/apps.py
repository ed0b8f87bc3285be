from django.apps import AppConfig

from jobs.signals import job_moved, run_resumed


class NotificationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notifications"
    verbose_name = "notifications"

    def ready(self):
        # Here, not at the top: the outbox imports the models, which exist once every app is
        # loaded.
        from .outbox import job_moved_record, run_resumed_record

        job_moved.connect(job_moved_record, dispatch_uid="notifications.job_moved_record")
        run_resumed.connect(run_resumed_record, dispatch_uid="notifications.run_resumed_record")

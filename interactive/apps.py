from django.apps import AppConfig


class InteractiveConfig(AppConfig):
    name = "interactive"
    verbose_name = "Interactive work"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Here, not at the top: sessions imports the models, which exist once every app is
        # loaded. A session that ends takes its API token with it.
        from jobs.signals import job_ended

        from .sessions import session_ended

        job_ended.connect(session_ended, dispatch_uid="interactive.session_ended")

from django.apps import AppConfig

from jobs.signals import job_ended


class InteractiveConfig(AppConfig):
    name = "interactive"
    verbose_name = "Interactive work"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Here, not at the top: services imports the models, which exist once every app is
        # loaded. A job that ended takes its proxy routes with it.
        from .services import job_ended_routes_end

        job_ended.connect(job_ended_routes_end, dispatch_uid="interactive.routes_end")
        # A session that ends takes its API token with it.
        from .sessions import session_ended

        job_ended.connect(session_ended, dispatch_uid="interactive.session_ended")

from django.apps import AppConfig

from jobs.signals import job_ended


class InteractiveConfig(AppConfig):
    name = "interactive"
    verbose_name = "Interactive work"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Here, not at the top: sessions and services import the models, which exist once every
        # app is loaded. A session that ends takes its API token with it; a job that ended, its
        # proxy routes.
        from .services import job_ended_routes_end
        from .sessions import session_ended

        job_ended.connect(session_ended, dispatch_uid="interactive.session_ended")
        job_ended.connect(job_ended_routes_end, dispatch_uid="interactive.routes_end")

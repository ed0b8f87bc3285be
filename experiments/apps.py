from django.apps import AppConfig

from jobs.signals import job_ended


class ExperimentsConfig(AppConfig):
    name = "experiments"
    verbose_name = "Experiments"

    def ready(self):
        # Here, not at the top: services imports the models, which exist once every app is
        # loaded. A trial that ended frees a slot of its sweep: the next trial goes in.
        from .services import job_ended_advance

        job_ended.connect(job_ended_advance, dispatch_uid="experiments.job_ended_advance")

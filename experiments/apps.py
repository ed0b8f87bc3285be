from django.apps import AppConfig

from jobs.folds import fold_register
from jobs.signals import job_ended


class ExperimentsConfig(AppConfig):
    name = "experiments"
    verbose_name = "Experiments"

    def ready(self):
        # Here, not at the top: services imports the models, which exist once every app is
        # loaded. A trial that ended frees a slot of its sweep: the next trial goes in.
        from .folds import SWEEPS
        from .services import job_ended_advance

        job_ended.connect(job_ended_advance, dispatch_uid="experiments.job_ended_advance")
        fold_register(SWEEPS)  # the job list: a sweep's trials are one row of the sweep

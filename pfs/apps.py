from django.apps import AppConfig


class PfsConfig(AppConfig):
    name = "pfs"
    verbose_name = "PFS (files)"
    default_auto_field = "django.db.models.BigAutoField"

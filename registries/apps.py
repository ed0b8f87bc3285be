from django.apps import AppConfig


class RegistriesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "registries"
    verbose_name = "registry credentials"

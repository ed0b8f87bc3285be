from django.apps import AppConfig


class InteractiveConfig(AppConfig):
    name = "interactive"
    verbose_name = "Interactive work"
    default_auto_field = "django.db.models.BigAutoField"

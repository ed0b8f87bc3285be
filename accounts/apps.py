from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self):
        # In ready(), where Django wants imports that register something: this module is
        # imported while the apps are still loading.
        from . import schema  # noqa: F401  (registers the OpenAPI extension)

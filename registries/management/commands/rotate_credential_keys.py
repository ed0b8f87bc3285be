from django.core.management.base import BaseCommand, CommandError

from interactive.services import route_rotate_keys
from notifications.services import subscription_rotate_keys
from registries.crypto import CredentialKeyError
from registries.services import registry_rotate_keys


class Command(BaseCommand):
    help = ("Encrypt every registry password, webhook secret and proxy route's headers again "
            "with the first key of PADDLECLOUD_CREDENTIAL_KEYS. Run it after putting a new key "
            "first; then the old keys can be removed.")

    def handle(self, *args, **options):
        try:
            count = registry_rotate_keys()
            secrets = subscription_rotate_keys()
            routes = route_rotate_keys()
        except CredentialKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"re-encrypted {count} registry password(s), {secrets} webhook "
                          f"secret(s) and the headers of {routes} proxy route(s) with the "
                          "newest key")

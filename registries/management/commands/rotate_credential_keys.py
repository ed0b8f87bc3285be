from django.core.management.base import BaseCommand, CommandError

from notifications.services import subscription_rotate_keys
from registries.crypto import CredentialKeyError
from registries.services import registry_rotate_keys


class Command(BaseCommand):
    help = ("Encrypt every registry password and webhook secret again with the first key of "
            "PADDLECLOUD_CREDENTIAL_KEYS. Run it after putting a new key first; then the old "
            "keys can be removed.")

    def handle(self, *args, **options):
        try:
            count = registry_rotate_keys()
            secrets = subscription_rotate_keys()
        except CredentialKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"re-encrypted {count} registry password(s) and {secrets} webhook "
                          "secret(s) with the newest key")

from django.core.management.base import BaseCommand, CommandError

from registries.crypto import CredentialKeyError
from registries.services import registry_rotate_keys


class Command(BaseCommand):
    help = ("Encrypt every registry password again with the first key of "
            "PADDLECLOUD_CREDENTIAL_KEYS. Run it after putting a new key first; then the old "
            "keys can be removed.")

    def handle(self, *args, **options):
        try:
            count = registry_rotate_keys()
        except CredentialKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"re-encrypted {count} registry password(s) with the newest key")

"""Set up the demo: datacenter ``datacenter1`` and user ``demo``, and print how to log in.

The demo password is generated once and kept in var/demo-password (readable only by you), so
running this again prints the same credentials.
"""

import secrets

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.services import datacenter_upsert, user_upsert

from ._errors import user_errors

DATACENTER = "datacenter1"
USERNAME = "demo"


class Command(BaseCommand):
    help = "Create (or refresh) the demo datacenter and user and print their credentials."

    def add_arguments(self, parser):
        parser.add_argument("--endpoint", default="http://127.0.0.1:8000",
                            help="the portal's address, for the printed ~/.paddle/config")

    def handle(self, *args, endpoint, **options):
        path = settings.VAR_DIR / "demo-password"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(12))
        password = path.read_text().strip()
        with user_errors():
            datacenter_upsert(DATACENTER, description="The demo datacenter (embedded default)")
            user_upsert(USERNAME, password=password, datacenter_names=[DATACENTER],
                        staff=True, superuser=True)
        self.stdout.write(
            f"\nDemo account (also a Django admin):\n"
            f"  open      {endpoint}/\n"
            f"  username  {USERNAME}\n"
            f"  password  {password}\n\n"
            f"~/.paddle/config for paddlectl:\n"
            f"  datacenters:\n"
            f"  - name: {DATACENTER}\n"
            f"    username: {USERNAME}\n"
            f"    password: {password}\n"
            f"    endpoint: {endpoint}\n"
            f"  current-datacenter: {DATACENTER}\n"
        )

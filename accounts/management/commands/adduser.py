"""Create a user, or update them: password, datacenter membership, quota, staff flag."""

import os
import sys

from django.core.management.base import BaseCommand, CommandError

from accounts.models import QUOTA_RESOURCES
from accounts.services import user_upsert
from paddlecloud_core.quantity import parse_bytes, parse_cpu

from ._errors import quantity_argument, user_errors


class Command(BaseCommand):
    help = ("Create or update a user and their membership and quota in a datacenter. "
            "Running it again updates what is given.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument("--password", help="the password (visible in `ps`; prefer "
                            "--password-stdin or --password-env in scripts)")
        secret.add_argument("--password-stdin", action="store_true",
                            help="read the password from the first line of standard input")
        secret.add_argument("--password-env", metavar="VAR",
                            help="read the password from environment variable VAR")
        parser.add_argument("--datacenter", action="append", default=[], metavar="DC",
                            help="add the user to this datacenter (repeatable); quota options "
                            "apply to each one named")
        parser.add_argument("--email")
        parser.add_argument("--cpu", type=quantity_argument(parse_cpu),
                            help="CPU quota: 8, 0.5, 500m")
        parser.add_argument("--memory", type=quantity_argument(parse_bytes),
                            help="memory quota: 16Gi")
        parser.add_argument("--gpu", type=int, help="GPU quota")
        parser.add_argument("--jobs", type=int, help="concurrent jobs quota")
        parser.add_argument("--queued", type=int, help="how many jobs may wait at once")
        parser.add_argument("--storage", type=quantity_argument(parse_bytes),
                            help="PFS storage quota: 100Gi")
        staff = parser.add_mutually_exclusive_group()
        staff.add_argument("--staff", dest="staff", action="store_true", default=None,
                           help="may use the Django admin")
        staff.add_argument("--no-staff", dest="staff", action="store_false")
        parser.add_argument("--superuser", action="store_true", default=None)

    def handle(self, *args, username, **options):
        password = options["password"]
        if options["password_stdin"]:
            password = sys.stdin.readline().rstrip("\n")
        elif options["password_env"]:
            password = os.environ.get(options["password_env"])
            if password is None:
                raise CommandError(f"--password-env: {options['password_env']} is not set")
        quota = {key: options[key] for key in QUOTA_RESOURCES if options[key] is not None}
        if quota and not options["datacenter"]:
            raise CommandError("quota options need --datacenter: quotas are per datacenter")
        with user_errors():
            user, created = user_upsert(
                username,
                password=password,
                datacenter_names=options["datacenter"],
                quota=quota,
                email=options["email"],
                staff=options["staff"],
                superuser=options["superuser"],
            )
        dcs = ", ".join(dc.name for dc in user.datacenters.all()) or "no datacenter"
        verb = "Created" if created else "Updated"
        self.stdout.write(f"{verb} user {user.username} (member of {dcs})")

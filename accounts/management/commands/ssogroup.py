"""Map an identity provider's group to a datacenter (single sign-on; docs/admin/sso.md)."""

from django.core.management.base import BaseCommand

from accounts.models import SsoGroupMapping
from accounts.sso import sso_group_map, sso_group_unmap

from ._errors import user_errors


class Command(BaseCommand):
    help = ("Members of GROUP (as the provider's groups claim writes it) become members of "
            "DATACENTER at their next single sign-on login; --remove undoes it (the memberships "
            "it granted go at each user's next login). --list shows the mappings.")

    def add_arguments(self, parser):
        parser.add_argument("group", nargs="?")
        parser.add_argument("datacenter", nargs="?")
        parser.add_argument("--remove", action="store_true", help="remove the mapping")
        parser.add_argument("--list", dest="list_mappings", action="store_true",
                            help="list every mapping")

    def handle(self, *args, group=None, datacenter=None, remove=False, list_mappings=False,
               **options):
        if list_mappings:
            for mapping in SsoGroupMapping.objects.select_related("datacenter"):
                self.stdout.write(f"{mapping.group}\t{mapping.datacenter.name}")
            return
        if not group or not datacenter:
            self.stderr.write("give GROUP and DATACENTER, or --list")
            raise SystemExit(2)
        with user_errors():
            if remove:
                removed = sso_group_unmap(group, datacenter)
                self.stdout.write(f"Removed the mapping of group {group!r} to {datacenter}."
                                  if removed else
                                  f"Group {group!r} was not mapped to {datacenter}.")
                return
            _, created = sso_group_map(group, datacenter)
        self.stdout.write(f"{'Mapped' if created else 'Already mapped:'} group {group!r} to "
                          f"datacenter {datacenter}.")

"""Publish a job template, or update one (issue 39): its values, locked fields and limits, as
the admin's Job templates page holds them (``paddlecloud_core.templates``)."""

import json

from django.core.exceptions import ValidationError as FormError
from django.core.management.base import BaseCommand, CommandError

from jobs.models import JobTemplate


def _json(text: str, part: str):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandError(f"--{part}: not JSON ({exc})") from None


class Command(BaseCommand):
    help = ("Publish a job template users submit from (paddlectl submit --template NAME), or "
            "update one: running it again changes what is given.")

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--description")
        parser.add_argument("--spec", metavar="JSON",
                            help='values as users write them: {"image": "paddle:2.6", '
                                 '"memory": "4Gi"}')
        parser.add_argument("--lock", action="append", metavar="FIELD",
                            help="a field users may not change (repeatable; replaces the "
                                 "list)")
        parser.add_argument("--limits", metavar="JSON",
                            help='{"trainers": {"min": 1, "max": 4}, "priority": '
                                 '{"choices": ["low", "normal"]}}')
        published = parser.add_mutually_exclusive_group()
        published.add_argument("--publish", dest="published", action="store_true",
                               default=None)
        published.add_argument("--unpublish", dest="published", action="store_false")

    def handle(self, *args, name, **options):
        template = JobTemplate.objects.filter(name=name).first() or JobTemplate(name=name)
        created = template.pk is None
        if options["description"] is not None:
            template.description = options["description"]
        if options["spec"] is not None:
            template.spec = _json(options["spec"], "spec")
        if options["lock"] is not None:
            template.locked = options["lock"]
        if options["limits"] is not None:
            template.limits = _json(options["limits"], "limits")
        if options["published"] is not None:
            template.published = options["published"]
        try:
            template.full_clean()
        except FormError as exc:
            raise CommandError("; ".join(f"{part}: {' '.join(messages)}"
                                         for part, messages in exc.message_dict.items())
                               ) from None
        template.save()
        self.stdout.write(f"template {name} {'created' if created else 'updated'}"
                          f"{'' if template.published else ' (not published)'}")

"""``paddlecloud``: the portal's administration command (manage.py, installed on PATH).

    paddlecloud migrate
    paddlecloud adddatacenter datacenter1
    paddlecloud adduser alice --password ... --datacenter datacenter1
    paddlecloud runportal --port 8000
"""

import os
import sys

from paddlecloud import celery_app


def main(argv: list[str] | None = None) -> None:
    if celery_app is None:
        sys.exit("paddlecloud: the portal is not installed here (this is the client: paddlectl "
                 "and the SDK); install it with: pip install 'paddlecloud[server]'")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddlecloud.settings")
    from django.core.management import execute_from_command_line  # the client has no Django

    execute_from_command_line(["paddlecloud", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

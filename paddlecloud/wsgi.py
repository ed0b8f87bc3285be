"""WSGI entry point, for servers without WebSockets (the dashboard's live views need ASGI)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddlecloud.settings")
application = get_wsgi_application()

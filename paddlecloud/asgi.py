"""The ASGI app: Django for HTTP (PFS byte streams first), Channels for WebSockets."""

import os
import warnings

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddlecloud.settings")
# WhiteNoise answers static files with a synchronous iterator, which Django reads whole under
# ASGI and warns about on every file: harmless for the pages' small assets (whitenoise#359).
warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume synchronous",
                        category=Warning, module="django.core.handlers.asgi")
django_asgi_app = get_asgi_application()  # before importing anything that touches models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import OriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from pfs.transfer import PfsTransferApp  # noqa: E402

from .routing import websocket_urlpatterns  # noqa: E402


class AllowedHostsOrigin(OriginValidator):
    """A WebSocket is opened only from a page of this site: its Origin must be one of
    ALLOWED_HOSTS (read on each connection, like Django's own host check). Others are refused
    at the handshake (403)."""

    def __init__(self, application):  # (no fixed list of origins, unlike the parent)
        self.application = application

    @property
    def allowed_origins(self):
        return settings.ALLOWED_HOSTS


application = ProtocolTypeRouter({
    # PFS byte streams (uploads, downloads) are answered before Django, unbuffered.
    "http": PfsTransferApp(django_asgi_app),
    "websocket": AllowedHostsOrigin(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})

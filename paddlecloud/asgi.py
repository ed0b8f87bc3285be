"""The ASGI app: Django for HTTP (jobs' master calls and PFS byte streams first), Channels for
WebSockets."""

import asyncio
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

from accounts.websockets import ClientTokens  # noqa: E402
from interactive.proxy import RouteProxy  # noqa: E402
from jobs.master.app import MasterApp  # noqa: E402
from kernel.metrics import MetricsApp  # noqa: E402
from kernel.security import ForwardedHeaders, websocket_origin_allowed  # noqa: E402
from pfs.transfer import PfsTransferApp  # noqa: E402

from .routing import websocket_urlpatterns  # noqa: E402


class SameOrigin:
    """A WebSocket is opened only from a page of this site (its own scheme, host and port) or
    of CSRF_TRUSTED_ORIGINS (kernel.security; read on each handshake, like Django's own
    checks). Others are refused at the handshake (403), before any consumer or channel is
    made for them."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if websocket_origin_allowed(scope):
            return await self.application(scope, receive, send)
        if (await receive())["type"] == "websocket.connect":
            await send({"type": "websocket.close"})  # closed before accepted: a 403
        return None


# Jobs' master calls (a trainer's next task) and PFS byte streams (uploads, downloads,
# unbuffered) are answered before Django.
http = MasterApp(PfsTransferApp(django_asgi_app))
# Prometheus scrapes GET /metrics at the pod's address (in no ALLOWED_HOSTS), with its token:
# answered first of all (kernel/metrics.py).
http_with_metrics = MetricsApp(http)


async def lifespan(scope, receive, send):
    """The server's start and stop: at the stop, the database threads of the apps before
    Django (the master's, the PFS transfers') close their connections."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(http.stop)
            await send({"type": "lifespan.shutdown.complete"})
            return


# Forwarded headers are judged before anything reads them: believed from the trusted proxies
# only (kernel.security), never from a job's relay. Then a request to a route's origin
# ({key}.PADDLECLOUD_SESSIONS_DOMAIN, by its Host) goes to the proxy (interactive/proxy.py:
# a job's port, behind the route's own cookie), never to the portal.
application = ForwardedHeaders(RouteProxy(ProtocolTypeRouter({
    "http": http_with_metrics,
    "lifespan": lifespan,
    # paddlectl's and the SDK's with their token; the pages' with their session, same origin.
    "websocket": ClientTokens(URLRouter(websocket_urlpatterns),
                              SameOrigin(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
})))

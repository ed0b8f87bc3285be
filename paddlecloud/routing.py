"""WebSocket routes (the protocol is in jobs/consumers.py and docs/users/api.md)."""

from django.urls import path

from interactive import routing as interactive_routing
from jobs import consumers

websocket_urlpatterns = [
    path("ws/jobs/", consumers.JobListConsumer.as_asgi()),
    path("ws/jobs/<str:name>/", consumers.JobConsumer.as_asgi()),
    path("ws/jobs/<str:name>/logs/", consumers.LogConsumer.as_asgi()),
    path("ws/jobs/<str:name>/metrics/", consumers.MetricsConsumer.as_asgi()),
    # exec, port-forward (interactive/routing.py)
    *interactive_routing.websocket_urlpatterns,
]

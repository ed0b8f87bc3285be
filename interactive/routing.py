"""The interactive WebSocket routes (included by paddlecloud/routing.py)."""

from django.urls import path

from . import consumers

websocket_urlpatterns = [
    path("ws/jobs/<str:name>/ports/<int:port>/", consumers.PortForwardConsumer.as_asgi()),
]

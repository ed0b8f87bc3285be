"""WebSocket routes. The apps add their consumers here (job state, log lines)."""

websocket_urlpatterns: list = []

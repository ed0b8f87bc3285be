"""WebSockets of interactive work: port-forward's byte stream to a replica's port."""

from channels.generic.websocket import AsyncWebsocketConsumer


class PortForwardConsumer(AsyncWebsocketConsumer):
    """Binary frames both ways between the client and ``Backend.port_open``."""

    async def connect(self):
        await self.close(code=4404)

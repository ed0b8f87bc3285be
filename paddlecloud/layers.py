"""The embedded default's channel layer: Channels' in-memory layer, safe to send to from
other threads.

The embedded worker runs Celery tasks in threads of the portal's process; a task that moves a
job to another state tells the dashboards through the channel layer from its own event loop
(``async_to_sync``). The in-memory layer's queues belong to the server's event loop and must
only be touched from it, so a send from elsewhere is handed to that loop.
"""

from __future__ import annotations

import asyncio

from channels.layers import InMemoryChannelLayer


class InProcessChannelLayer(InMemoryChannelLayer):
    _home: asyncio.AbstractEventLoop | None = None

    def _remember_loop(self) -> None:
        self._home = asyncio.get_running_loop()

    async def _at_home(self, coroutine):
        home, here = self._home, asyncio.get_running_loop()
        if home is None or home is here or home.is_closed() or not home.is_running():
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, home))

    async def receive(self, channel):
        self._remember_loop()
        return await super().receive(channel)

    async def group_add(self, group, channel):
        self._remember_loop()
        return await super().group_add(group, channel)

    async def send(self, channel, message):
        return await self._at_home(super().send(channel, message))

    async def group_send(self, group, message):
        return await self._at_home(super().group_send(group, message))

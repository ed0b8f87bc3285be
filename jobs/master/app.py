"""A job master's task calls (docs/master.md), answered on the raw ASGI interface, before
Django: every trainer of every job calls several times a second, and a call needs none of
Django's middleware, sessions or users — the token names the job. The answer is
``dispatch.master_call``'s, the same the API view gives elsewhere.

The calls' database work runs on a few threads of their own (``PADDLECLOUD_MASTER_THREADS``,
``kernel.before_django.DatabaseThreads``), each keeping its connection between calls, as
a pool would: a call costs its statements and nothing more (no connection made, checked out
or health-checked). A connection that saw an error, or sat idle a while, is checked before it
is used again."""

from __future__ import annotations

import json
import re

from django.conf import settings

from kernel.before_django import BeforeDjango, DatabaseThreads, Exchange
from kernel.errors import ValidationError
from kernel.storable import storable

from . import dispatch

# jobs/urls.py's paths for the master's views (a uuid as Django's converter takes it).
CALL_RE = re.compile(r"^/api/v1/master/(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                     r"[0-9a-f]{4}-[0-9a-f]{12})/(?:next|(?P<job_action>position|resume)|tasks/(?P<task>[0-9]{1,18})/"
                     r"(?P<action>[^/]+))$")
BODY_LIMIT = 64 * 1024  # a call's body is a few dozen bytes; a reason at most 500 characters


class MasterApp(BeforeDjango):
    """ASGI middleware: ``POST /api/v1/master/…`` here, everything else to ``app``."""

    request_signals = False  # its threads keep their own connections

    def __init__(self, app):
        super().__init__(app)
        self.threads = DatabaseThreads(settings.PADDLECLOUD_MASTER_THREADS, "master-db")

    def route(self, scope):
        if scope["method"] == "POST" and CALL_RE.match(scope["path"]):
            return self.call
        return None

    async def call(self, exchange: Exchange) -> None:
        found = CALL_RE.match(exchange.scope["path"])
        body = await exchange.body(BODY_LIMIT)
        try:
            data = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            raise ValidationError.for_field("body", f"not JSON: {exc}") from None
        except RecursionError:
            raise ValidationError.for_field("body", "not JSON: nested too deeply") from None
        storable(data)
        task = found["task"]
        result = await self.threads.run(
            dispatch.master_call, found["uid"],
            dispatch.bearer(exchange.header("authorization")),
            found["action"] or found["job_action"] or "next", int(task) if task else None,
            data)
        await exchange.json(200, result)

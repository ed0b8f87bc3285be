"""A job master's task calls (docs/master.md), answered on the raw ASGI interface, before
Django: every trainer of every job calls several times a second, and a call needs none of
Django's middleware, sessions or users — the token names the job. The answer is
``dispatch.master_call``'s, the same the API view gives elsewhere.

The calls' database work runs on a few threads of their own (``PADDLECLOUD_MASTER_THREADS``,
``MasterThreads``), each keeping its connection between calls, as a pool would: a call costs
its statements and nothing more (no connection made, checked out or health-checked). A
connection that saw an error, or sat idle a while, is checked before it is used again. A
thread takes every call waiting for it (up to ``BATCH``) and runs them in one transaction
(``dispatch.master_calls``): under load, one commit — one wait for the disk — answers many
calls, where it used to answer one."""

from __future__ import annotations

import json
import logging
import re

from django.conf import settings

from kernel.before_django import BeforeDjango, DatabaseThreads, Exchange
from kernel.errors import ValidationError
from kernel.storable import storable

from . import dispatch

MASTER_PREFIX = "/api/v1/master/"
# jobs/urls.py's paths for the master's views (a uuid as Django's converter takes it).
CALL_RE = re.compile("^" + re.escape(MASTER_PREFIX) +
                     r"(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                     r"[0-9a-f]{4}-[0-9a-f]{12})/(?:next|(?P<job_action>position|resume)|tasks/(?P<task>[0-9]{1,18})/"
                     r"(?P<action>[^/]+))$")
BODY_LIMIT = 64 * 1024  # a call's body is a few dozen bytes; a reason at most 500 characters


BATCH = 64  # calls a thread runs in one transaction, at most


class QuietMasterCalls(logging.Filter):
    """The server's access log without a line per master call answered: trainers make
    hundreds a second, and writing each line cost the event loop a fifth of its time
    (bench/master.py). Calls answered with an error (4xx, 5xx) are still logged; every call
    is counted in the portal's metrics (``metrics.http_observed``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # uvicorn's access line: (client, method, path, HTTP version, status)
        if isinstance(args, tuple) and len(args) == 5 and args[1] == "POST" \
                and isinstance(args[4], int) and args[4] < 400:
            return not str(args[2]).startswith(MASTER_PREFIX)
        return True


QUIET = QuietMasterCalls()


class MasterThreads(DatabaseThreads):
    """``DatabaseThreads`` for ``dispatch.master_call``: each thread takes the call it waited
    for and every other already waiting (up to ``BATCH``), runs them together
    (``dispatch.master_calls``: one transaction), and answers each once committed."""

    batch = BATCH

    def _run(self, calls: list[tuple]) -> list[tuple]:
        try:
            return dispatch.master_calls([args for _function, args in calls])
        except BaseException as exc:  # each caller's to raise
            return [(None, exc)] * len(calls)


class MasterApp(BeforeDjango):
    """ASGI middleware: ``POST /api/v1/master/…`` here, everything else to ``app``."""

    request_signals = False  # its threads keep their own connections

    def __init__(self, app):
        super().__init__(app)
        self.threads = MasterThreads(settings.PADDLECLOUD_MASTER_THREADS, "master-db")
        logging.getLogger("uvicorn.access").addFilter(QUIET)  # once: the same filter

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

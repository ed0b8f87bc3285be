"""The real parts the portal talks to: a Celery worker through the Redis broker, and the
channels-redis layer. These run against the Redis of REDIS_URL, never a fake."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from accounts.models import ApiToken
from accounts.services import token_create
from accounts.tasks import token_purge
from kernel.celery import app as celery_app


@pytest.mark.django_db(transaction=True)
def test_a_task_runs_on_a_worker_through_redis(celery_worker, alice):
    stale = token_create(alice).token
    live = token_create(alice).token
    ApiToken.objects.filter(pk=stale.pk).update(expires_at=timezone.now() - timedelta(days=40))

    result = token_purge.delay()
    assert result.get(timeout=30) == 1
    assert list(ApiToken.objects.values_list("pk", flat=True)) == [live.pk]


def test_beat_schedules_the_token_purge():
    entry = settings.CELERY_BEAT_SCHEDULE["purge-stale-api-tokens"]
    assert entry["task"] in celery_app.tasks


def test_channel_layer_round_trip_through_redis():
    layer = get_channel_layer()
    assert type(layer).__module__ == "channels_redis.core"

    async def round_trip():
        channel = await layer.new_channel()
        await layer.group_add("jobs.alice", channel)
        await layer.group_send("jobs.alice", {"type": "job.state", "state": "running"})
        message = await layer.receive(channel)
        await layer.group_discard("jobs.alice", channel)
        return message

    assert async_to_sync(round_trip)() == {"type": "job.state", "state": "running"}

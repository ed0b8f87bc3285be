"""The dashboard's WebSockets, through the whole ASGI app (origin check, session auth, routing)
on both channel layers: channels-redis on the real Redis, and the embedded default's
in-process layer.

Logs are followed from the worker's file in PFS, as both backends write it.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from django.test import Client

from jobs.logs import lines, pumps
from jobs.models import REPEAT_BURST, Job, JobEvent, Replica, event_repeatable
from jobs.services import EVENTS_SHOWN, job_delete
from jobs.states import JobState, ReplicaState
from jobs.transitions import job_transition, replica_transition
from tests.factories import job_row
from tests.jobs.files import file_at, log_path, metrics_path
from tests.ws import WebsocketCommunicator

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

TIMEOUT = 10


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def connect(app, path: str, user=None, origin: bytes = b"http://testserver"):
    headers = [(b"origin", origin)]
    if user is not None:
        headers.append((b"cookie", await sync_to_async(session_cookie)(user)))
    socket = WebsocketCommunicator(app, path, headers=headers)
    connected, code = await socket.connect(timeout=TIMEOUT)
    assert connected, f"refused at the handshake ({code})"
    return socket


async def receive(socket) -> dict:
    return await socket.receive_json_from(timeout=TIMEOUT)


async def refused(socket) -> tuple[dict, int]:
    error = await receive(socket)
    closed = await socket.receive_output(timeout=TIMEOUT)
    assert closed["type"] == "websocket.close"
    return error, closed["code"]


def make_job(owner, datacenter, name="train", trainers=1, state=JobState.RUNNING) -> Job:
    return job_row(owner, datacenter, name, trainers=trainers, state=state,
                   replicas={"state": ReplicaState.RUNNING})


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(text)


async def collect_lines(socket, until: int) -> list[tuple[int, str]]:
    """Numbered lines until line ``until`` has come; checks the numbering as it goes."""
    got: list[tuple[int, str]] = []
    while not got or got[-1][0] < until:
        message = await receive(socket)
        assert message["type"] == "lines", message
        expected = got[-1][0] + 1 if got else message["first"]
        assert message["first"] == expected, f"a gap or a repeat at {message['first']}"
        assert message["next"] == message["first"] + len(message["lines"])
        got.extend(enumerate(message["lines"], message["first"]))
    return got


async def test_someone_not_logged_in_is_told_to_log_in(app, alice, datacenter):
    await sync_to_async(make_job)(alice, datacenter)
    for path in ("/ws/jobs/", "/ws/jobs/train/", "/ws/jobs/train/logs/"):
        socket = await connect(app, path)
        error, code = await refused(socket)
        assert code == 4401 and error["code"] == "not_authenticated"


async def test_another_users_job_is_closed_as_not_found(app, alice, make_user, datacenter):
    bob = await sync_to_async(make_user)("bob")
    await sync_to_async(make_job)(alice, datacenter)
    for path in ("/ws/jobs/train/", "/ws/jobs/train/logs/", "/ws/jobs/train/metrics/"):
        socket = await connect(app, path, bob)
        error, code = await refused(socket)
        assert code == 4404
        assert error == {"type": "error", "code": "not_found",
                         "message": "you have no job named 'train' in datacenter 'datacenter1'"}


async def test_bad_parameters_are_named(app, alice, datacenter, other_datacenter):
    await sync_to_async(make_job)(alice, datacenter)
    cases = [("/ws/jobs/train/logs/?worker=trainer-7", 4404, "worker 'trainer-7'"),
             ("/ws/jobs/train/logs/?from=-1", 4400, "from"),
             ("/ws/jobs/train/logs/?from=abc", 4400, "from"),
             ("/ws/jobs/?datacenter=datacenter2", 4403, "datacenter2")]
    for path, close_code, named in cases:
        error, code = await refused(await connect(app, path, alice))
        assert code == close_code and named in error["message"], (path, error)


async def test_a_page_of_another_site_cannot_open_a_socket(app, alice):
    socket = WebsocketCommunicator(app, "/ws/jobs/", headers=[
        (b"origin", b"https://evil.example"),
        (b"cookie", await sync_to_async(session_cookie)(alice))])
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert not connected
    await socket.disconnect()


async def test_log_lines_from_the_file_then_live_then_the_end(app, alice, datacenter):
    job = await sync_to_async(make_job)(alice, datacenter)
    replica = await sync_to_async(job.replicas.get)()
    path = log_path(job, replica)
    write(path, "".join(f"line {i}\n" for i in range(3)))
    socket = await connect(app, "/ws/jobs/train/logs/?worker=trainer-0", alice)
    assert await collect_lines(socket, 2) == [(0, "line 0"), (1, "line 1"), (2, "line 2")]

    write(path, "line 3\nline 4 has no newline yet")
    assert await collect_lines(socket, 3) == [(3, "line 3")]
    write(path, "…but now it has\n")
    assert await collect_lines(socket, 4) == [(4, "line 4 has no newline yet…but now it has")]

    write(path, "last words, unfinished")
    await sync_to_async(replica_transition)(replica, ReplicaState.SUCCEEDED, exit_code=0)
    assert await collect_lines(socket, 5) == [(5, "last words, unfinished")]
    assert await receive(socket) == {"type": "end", "next": 6}
    closed = await socket.receive_output(timeout=TIMEOUT)
    assert closed == {"type": "websocket.close", "code": 1000}
    await socket.disconnect()
    # Nothing is left running for a log that has ended and has no followers.
    for _ in range(100):
        if not pumps.hub()._groups:
            break
        await asyncio.sleep(0.1)
    assert pumps.hub()._groups == {}


async def test_a_reconnect_resumes_from_a_line_without_loss_or_repeat(app, alice, datacenter):
    job = await sync_to_async(make_job)(alice, datacenter)
    replica = await sync_to_async(job.replicas.get)()
    path = log_path(job, replica)
    write(path, "".join(f"line {i}\n" for i in range(10)))
    first = await connect(app, "/ws/jobs/train/logs/", alice)
    seen = await collect_lines(first, 9)
    await first.disconnect()
    write(path, "".join(f"line {i}\n" for i in range(10, 15)))  # written while away
    again = await connect(app, f"/ws/jobs/train/logs/?from={seen[-1][0] + 1}", alice)
    assert await collect_lines(again, 14) == [(i, f"line {i}") for i in range(10, 15)]
    await again.disconnect()


async def test_dropped_messages_are_refilled_from_the_file(app, alice, datacenter, settings,
                                                           layer):
    """A layer that holds 1 message per channel (each process's relay takes them as they come,
    so it drops one only when the relay is late); the followers still get every line once, in
    order."""
    settings.CHANNEL_LAYERS["default"].setdefault("CONFIG", {})["capacity"] = 1
    channel_layers.backends.clear()
    job = await sync_to_async(make_job)(alice, datacenter)
    replica = await sync_to_async(job.replicas.get)()
    path = log_path(job, replica)
    write(path, "")
    followers = [await connect(app, "/ws/jobs/train/logs/", alice) for _ in range(3)]
    total = 3000
    for start in range(0, total, 100):  # 30 writes, faster than the pump publishes
        write(path, "".join(f"line {i}\n" for i in range(start, start + 100)))
        await asyncio.sleep(0.02)
    for socket in followers:
        assert await collect_lines(socket, total - 1) == [(i, f"line {i}")
                                                          for i in range(total)]
        await socket.disconnect()


async def test_a_batch_lost_on_the_way_is_refilled_from_the_file(app, alice, datacenter):
    """The pump's batches as followers get them when one was lost between the pump and their
    process (this test publishes them, holding the pump's lease so no real pump runs): the
    lines of the lost batch come from the file, in order, and nothing comes twice."""
    from channels.layers import get_channel_layer
    from django.core.cache import cache

    job = await sync_to_async(make_job)(alice, datacenter)
    replica = await sync_to_async(job.replicas.get)()
    group = f"lines.{job.uid.hex}.log.trainer0"
    assert await cache.aadd(f"lines:lease:{group}", "this test", 60)
    path = log_path(job, replica)
    write(path, "".join(f"line {i}\n" for i in range(100)))
    followers = [await connect(app, "/ws/jobs/train/logs/", alice) for _ in range(2)]
    for socket in followers:  # from the file: they follow
        assert await collect_lines(socket, 99) == [(i, f"line {i}") for i in range(100)]
    write(path, "".join(f"line {i}\n" for i in range(100, 300)))
    # the batch of lines 100-199 was lost on the way; then comes 200-299
    await get_channel_layer().group_send(group, {
        "type": "lines.batch", "first": 200, "offset": path.stat().st_size,
        "lines": [f"line {i}" for i in range(200, 300)]})
    for socket in followers:
        assert await collect_lines(socket, 299) == [(i, f"line {i}") for i in range(100, 300)]
        assert await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()


async def test_one_pump_serves_every_follower(app, alice, datacenter):
    job = await sync_to_async(make_job)(alice, datacenter)
    replica = await sync_to_async(job.replicas.get)()
    followers = [await connect(app, "/ws/jobs/train/logs/", alice) for _ in range(5)]
    write(log_path(job, replica), "hello\n")
    for socket in followers:
        assert await collect_lines(socket, 0) == [(0, "hello")]
    pumps = [task for task in asyncio.all_tasks() if "Hub._pump" in repr(task.get_coro())]
    assert len(pumps) == 1
    for socket in followers:
        await socket.disconnect()


async def test_metrics_records_live(app, alice, datacenter):
    job = await sync_to_async(make_job)(alice, datacenter)
    replica = await sync_to_async(job.replicas.get)()
    path = metrics_path(job, replica)
    write(path, '{"step": 0, "time": 1.5, "loss": 2.0}\n')
    socket = await connect(app, "/ws/jobs/train/metrics/", alice)
    assert await receive(socket) == {"type": "metrics", "first": 0, "next": 1, "records": [
        {"seq": 0, "step": 0, "time": 1.5, "metrics": {"loss": 2.0}}]}
    write(path, 'not json\n{"step": 1, "time": 2.5, "loss": 1.0, "acc": 0.5}\n')
    assert await receive(socket) == {"type": "metrics", "first": 1, "next": 3, "records": [
        {"seq": 2, "step": 1, "time": 2.5, "metrics": {"loss": 1.0, "acc": 0.5}}]}
    await socket.disconnect()


def in_a_worker_thread(function, *args, **kwargs):
    """As a Celery task does it: in a thread of its own, with no event loop."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(value=function(*args, **kwargs)))
    thread.start()
    thread.join(TIMEOUT)
    return result.get("value")


async def test_the_job_page_gets_a_snapshot_then_each_change(app, alice, datacenter):
    job = await sync_to_async(make_job)(alice, datacenter, state=JobState.STARTING)
    socket = await connect(app, "/ws/jobs/train/", alice)
    snapshot = [await receive(socket) for _ in range(3)]
    assert [m["type"] for m in snapshot] == ["job", "workers", "events"]
    assert snapshot[0]["job"]["state"] == "starting"
    assert [w["name"] for w in snapshot[1]["workers"]] == ["trainer-0"]

    await sync_to_async(in_a_worker_thread)(job_transition, job, JobState.RUNNING, "all up")
    job_message, workers, event = [await receive(socket) for _ in range(3)]
    assert job_message["job"]["state"] == "running"
    assert workers["type"] == "workers"
    assert event["type"] == "event"
    assert event["event"]["to_state"] == "running" and event["event"]["reason"] == "all up"

    await sync_to_async(in_a_worker_thread)(job_transition, job, JobState.KILLED, "by alice")
    messages = [await receive(socket) for _ in range(3)]
    assert messages[0]["job"]["state"] == "killed"
    await sync_to_async(job_delete)(alice, datacenter, "train")
    assert await receive(socket) == {"type": "job_deleted", "name": "train"}
    closed = await socket.receive_output(timeout=TIMEOUT)
    assert closed["code"] == 4404


async def test_the_job_page_gets_its_latest_events_and_their_repeats_as_they_count(
        app, alice, datacenter):
    """The snapshot holds the latest EVENTS_SHOWN events, as the page does; an event that
    counted more repeats since is sent again (the page replaces it by its id)."""
    job = await sync_to_async(make_job)(alice, datacenter, state=JobState.STARTING)

    def history():  # then REPEAT_BURST of a kind: each listed yet
        for number in range(EVENTS_SHOWN):
            JobEvent.objects.create(job=job, from_state="running", to_state="running",
                                    reason=f"event {number}")
        for number in range(EVENTS_SHOWN, EVENTS_SHOWN + REPEAT_BURST):
            event_repeatable(job.pk, "leased", "done", f"event {number}")

    await sync_to_async(history)()
    socket = await connect(app, "/ws/jobs/train/", alice)
    events = [await receive(socket) for _ in range(3)][2]["events"]
    assert [e["reason"] for e in events] == [
        f"event {n}" for n in range(REPEAT_BURST, EVENTS_SHOWN + REPEAT_BURST)]
    last = events[-1]

    def repeated():
        for number in range(3):
            event_repeatable(job.pk, "leased", "done", f"again {number}")
        job_transition(job, JobState.RUNNING, "all up")

    await sync_to_async(in_a_worker_thread)(repeated)
    messages = [await receive(socket) for _ in range(4)]
    sent = [m["event"] for m in messages if m["type"] == "event"]
    assert [(e["id"], e["reason"], e["repeats"]) for e in sent] == [
        (last["id"], last["reason"], 3), (sent[1]["id"], "all up", 0)]
    await socket.disconnect()


async def test_a_repeat_stamped_before_the_pages_last_read_and_committed_after_is_sent(
        app, alice, datacenter):
    """A repeat is stamped when it is counted and committed a moment later: the page's read
    between the two must not hide it from the next (it was "and 4 more" for good once); a
    count the page already has is not sent again."""
    from django.db.models import F
    from django.utils import timezone

    from jobs.notify import job_changed

    job = await sync_to_async(make_job)(alice, datacenter, state=JobState.STARTING)

    def burst():
        for number in range(REPEAT_BURST + 1):
            event_repeatable(job.pk, "leased", "waiting", f"given back {number}")

    await sync_to_async(burst)()
    socket = await connect(app, "/ws/jobs/train/", alice)
    counted = [await receive(socket) for _ in range(3)][2]["events"][-1]
    assert counted["repeats"] == 1
    stamped = timezone.now()  # the repeat's stamp, before the read below

    def read_between():
        job_transition(job, JobState.RUNNING, "all up")

    await sync_to_async(in_a_worker_thread)(read_between)
    messages = [await receive(socket) for _ in range(3)]
    assert [m["event"]["reason"] for m in messages if m["type"] == "event"] == ["all up"]

    def committed_after():  # as event_repeatable's update, committed after that read
        JobEvent.objects.filter(pk=counted["id"]).update(repeats=F("repeats") + 1,
                                                         repeated_until=stamped)
        JobEvent.objects.create(job=job, from_state="running", to_state="running",
                                reason="still up")
        job_changed(job.pk)

    await sync_to_async(in_a_worker_thread)(committed_after)
    messages = [await receive(socket) for _ in range(4)]
    assert sorted((m["event"]["reason"], m["event"]["repeats"]) for m in messages
                  if m["type"] == "event") == [(counted["reason"], 2), ("still up", 0)]
    await socket.disconnect()


async def test_a_burst_of_changes_all_reach_the_page(app, alice, datacenter):
    """Changes that come while the page is being sent the last ones are sent too."""
    job = await sync_to_async(make_job)(alice, datacenter, trainers=8, state=JobState.STARTING)
    await sync_to_async(Replica.objects.filter(job=job).update)(state=ReplicaState.STARTING)
    socket = await connect(app, "/ws/jobs/train/", alice)
    assert [(await receive(socket))["type"] for _ in range(3)] == ["job", "workers", "events"]

    def burst():
        for replica in job.replicas.all():
            replica_transition(replica, ReplicaState.RUNNING)
        job_transition(job, JobState.RUNNING)
        for replica in job.replicas.all():
            replica_transition(replica, ReplicaState.SUCCEEDED, exit_code=0)
        job_transition(job, JobState.SUCCEEDED, "every trainer exited 0")

    await sync_to_async(in_a_worker_thread)(burst)
    events, workers = [], None
    while len(events) < 18:
        message = await receive(socket)
        if message["type"] == "event":
            events.append(message["event"])
        elif message["type"] == "workers":
            workers = message["workers"]
    assert events[-1]["to_state"] == "succeeded" and events[-1]["worker"] is None
    assert len({(e["worker"], e["to_state"]) for e in events}) == 18  # each once
    assert {w["state"] for w in workers} == {"succeeded"}
    await socket.disconnect()


async def test_the_job_list_hears_of_the_users_jobs_only(app, alice, make_user, datacenter):
    bob = await sync_to_async(make_user)("bob")
    socket = await connect(app, "/ws/jobs/", alice)
    bobs = await sync_to_async(make_job)(bob, datacenter, name="bobs", state=JobState.STARTING)
    job = await sync_to_async(make_job)(alice, datacenter, state=JobState.STARTING)
    await sync_to_async(in_a_worker_thread)(job_transition, bobs, JobState.RUNNING)
    await sync_to_async(in_a_worker_thread)(job_transition, job, JobState.RUNNING)
    message = await receive(socket)
    assert message["type"] == "job"
    assert (message["job"]["name"], message["job"]["state"]) == ("train", "running")
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def test_the_job_list_hears_of_a_sweeps_trial_as_the_sweeps_row(app, alice, datacenter,
                                                                      package, held_tasks):
    """A trial that changes comes as its job, saying which row it is folded into, then as that
    row: the sweep with its progress (``jobs.folds``); a job of no sweep says none."""
    from experiments.services import sweep_submit
    from jobs.services import job_kill

    socket = await connect(app, "/ws/jobs/", alice)
    job = await sync_to_async(make_job)(alice, datacenter, state=JobState.STARTING)
    await sync_to_async(in_a_worker_thread)(job_transition, job, JobState.RUNNING)
    plain = await receive(socket)
    assert (plain["type"], plain["job"]["name"], "in" in plain) == ("job", "train", False)
    await sync_to_async(in_a_worker_thread)(sweep_submit, alice, datacenter, {
        "name": "lr", "parallel": 2, "job": {"entry": "python train.py", "package": package},
        "space": {"env.LR": [0.1, 0.01, 0.001]}})
    for _ in range(3):  # its first trials, then the sweep's row
        submitted = await receive(socket)
        assert submitted["type"] == "row" or submitted["in"]["name"] == "lr", submitted

    await sync_to_async(in_a_worker_thread)(job_kill, alice, datacenter, "lr-1")
    trial, row = await receive(socket), await receive(socket)
    assert (trial["type"], trial["job"]["name"], trial["job"]["state"]) == (
        "job", "lr-1", "killed")
    assert trial["in"] == {"kind": "sweep", "name": "lr"}
    assert (row["type"], row["row"]["kind"], row["row"]["name"]) == ("row", "sweep", "lr")
    # (lr-2 waits: "train" holds one of alice's two places)
    assert row["row"]["progress_shown"] == ("0 done, 0 running, 1 waiting, 0 stopped, "
                                            "1 killed, 1 to submit")
    assert [t["counted"] for t in row["row"]["trials"]] == ["killed", "waiting"]
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


@pytest.mark.parametrize("layer", ["redis"], indirect=True)
async def test_an_idle_socket_stays_open(app, alice, datacenter):
    """Nothing happens for longer than channels-redis's blocking read (5 s); then a change
    comes through."""
    job = await sync_to_async(make_job)(alice, datacenter, state=JobState.STARTING)
    socket = await connect(app, "/ws/jobs/", alice)
    assert await socket.receive_nothing(timeout=6)
    await sync_to_async(in_a_worker_thread)(job_transition, job, JobState.RUNNING)
    assert (await receive(socket))["job"]["state"] == "running"
    await socket.disconnect()


def test_pump_lines_end_is_published_once_the_writer_ended(tmp_path, layer):
    """The pump on its own: numbered batches with the byte offset after them, then the end."""
    path = tmp_path / "log"
    path.write_text("old\n")
    done = {"value": False}

    async def ended():
        return done["value"]

    async def run():
        layer_ = channel_layers["default"]
        channel = await layer_.new_channel()
        await layer_.group_add("lines.test", channel)
        task = asyncio.create_task(pumps.pump(pumps.Source("lines.test", file_at(path),
                                                             ended)))
        await asyncio.sleep(0.3)
        write(path, "new\ntail")
        done["value"] = True
        assert await asyncio.wait_for(layer_.receive(channel), TIMEOUT) == {
            "type": "lines.start", "next": 1}
        messages = [await asyncio.wait_for(layer_.receive(channel), TIMEOUT)]
        while messages[-1]["type"] != "lines.end":
            messages.append(await asyncio.wait_for(layer_.receive(channel), TIMEOUT))
        await asyncio.wait_for(task, TIMEOUT)
        return messages

    *batches, end = asyncio.run(run())
    assert [line for batch in batches for line in batch["lines"]] == ["new", "tail"]
    assert batches[0]["first"] == 1 and batches[-1]["offset"] == 12
    assert end == {"type": "lines.end", "next": 3, "offset": 12}


async def test_changes_marked_while_flushing_are_flushed_after():
    from jobs.consumers import Coalescing

    flushed, flushing = [], asyncio.Event()

    async def flush(keys):
        flushing.set()
        await asyncio.sleep(0.2)  # a slow read of the database
        flushed.append(sorted(keys))

    changes = Coalescing(flush)
    changes.mark(1)
    changes.mark(2)
    await flushing.wait()
    changes.mark(3)  # while 1 and 2 are being sent
    await asyncio.wait_for(changes.task, TIMEOUT)
    assert flushed == [[1, 2], [3]]


def test_the_tail_of_a_log_and_the_number_of_its_first_line(tmp_path):
    path = tmp_path / "log"
    log = file_at(path)
    assert lines.lines_tail(log, 3) == (0, [])  # not written yet
    path.write_text("".join(f"line {i}\n" for i in range(10)))
    assert lines.lines_tail(log, 3) == (7, ["line 7", "line 8", "line 9"])
    assert lines.lines_tail(log, 50) == (0, [f"line {i}" for i in range(10)])
    write(path, "half a line")  # being written: shown, and it counts as one
    assert lines.lines_tail(log, 2) == (9, ["line 9", "half a line"])
    assert lines.lines_tail(log, 0) == (10, [])


async def test_a_dashboard_notification_shows_on_the_open_job_list(app, alice, datacenter):
    from notifications.delivery import notifications_send
    from notifications.models import Notification, Subscription
    from notifications.outbox import test_record

    socket = await connect(app, "/ws/jobs/", alice)
    assert await socket.receive_nothing(timeout=1)  # it joins its group once accepted

    @sync_to_async
    def notify() -> str:
        subscription = Subscription.objects.create(owner=alice, datacenter=datacenter,
                                                   events=["job.failed"], channel="dashboard")
        notification = test_record(subscription)
        in_a_worker_thread(notifications_send, [str(notification.pk)])
        assert Notification.objects.get().sent_at is not None
        return str(notification.pk)

    notification = await notify()
    assert await receive(socket) == {
        "type": "notification", "id": notification,
        "text": "a test of PaddleCloud's notifications to the dashboard"}
    await socket.disconnect()

"""paddlecloud_sdk.master against the real portal (uvicorn, PostgreSQL): jobs submitted with a
dataset through the SDK, their master's calls made by ``master.reader()`` / ``master.tasks()``
with the job's master token — concurrent trainers, one stopping mid-task, exceptions in the
loop, leases renewed and lost, files that cannot be read. No job runs (queued work is held):
the test's threads are the trainers."""

from __future__ import annotations

import collections
import logging
import threading
import time

import pytest

from jobs.master.dispatch import master_token
from jobs.models import Job, JobEvent, Task
from paddlecloud_sdk import PaddleJob, master, recordio
from tests.factories import HOME, package_write

pytestmark = pytest.mark.django_db(transaction=True)

DATA = f"{HOME}/data"
ALL = [f"record-{n:04d}".encode() for n in range(1000)]
FIRST = ALL[:250]  # part-0.recordio
SECOND = ALL[250:500]  # part-1.recordio


@pytest.fixture
def dataset(live_portal, sdk_config, held_tasks, monkeypatch):
    """1000 records in 4 RecordIO files of 2 chunks each (250 a file) in alice's home, a
    package beside them; this process sees PFS as a replica of the local backend does."""
    home = live_portal.home
    package_write(home, "print('hi')\n")
    data = home / "data"
    data.mkdir()
    for part in range(4):
        with recordio.Writer(data / f"part-{part}.recordio", max_chunk_size=125 * 11) as w:
            for record in ALL[250 * part:250 * (part + 1)]:
                w.write(record)
    monkeypatch.setenv("PADDLE_PFS_HOME", str(home))
    return data


def submit(portal, name: str = "reader", **fields) -> tuple[str, str]:
    """Submit a job with a dataset through the SDK; its master's URL and token, as its
    replicas get them."""
    PaddleJob(job_name=name, entry_point="python train.py", trainer_package=f"{HOME}/pkg",
              **fields).submit()
    job = Job.objects.get(name=name)
    return f"{portal.url}/api/v1/master/{job.uid}", master_token(job)


def tasks_of(name: str = "reader") -> list[Task]:
    return list(Task.objects.filter(job__name=name).order_by("pass_no", "index"))


def reasons(to_state: str, name: str = "reader") -> list[str]:
    return list(JobEvent.objects.filter(job__name=name, to_state=to_state)
                .order_by("id").values_list("reason", flat=True))


def lease_threads() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith("paddlecloud-master-lease-")]


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "paddlecloud_sdk.master" and r.levelno == logging.WARNING]


def test_three_trainers_read_every_record_once_a_pass_one_stopping_mid_task(
        live_portal, dataset):
    url, token = submit(live_portal, dataset=f"{DATA}/part-*.recordio", task_records=40,
                        passes=2, trainers=3)
    attached = PaddleJob.attach("reader")  # the fields come back as given
    assert (attached.dataset, attached.dataset_unit, attached.task_records) == (
        f"{DATA}/part-*.recordio", "records", 40)

    stopped: list[bytes] = []
    plain: list[bytes] = []
    by_pass: dict[int, list[bytes]] = collections.defaultdict(list)
    read: list[master.Task] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def trainer(body):
        def run():
            try:
                start.wait(10)
                body()
            except BaseException as exc:  # reported in the test's thread
                errors.append(exc)
        return threading.Thread(target=run)

    def stopper():  # trainer 2: five records of its first task, then it stops
        for record in master.reader(url, token, 2):
            stopped.append(record)
            if len(stopped) == 5:
                break

    def reader():  # trainer 0: record after record until the master says done
        plain.extend(master.reader(url, token, 0))

    def task_by_task():  # trainer 1: knows each record's pass
        for task in master.tasks(url, token, 1):
            records = list(task)
            assert task.state == "held"  # done once the next task is asked for
            read.append(task)
            by_pass[task["pass"]].extend(records)

    threads = [trainer(stopper), trainer(reader), trainer(task_by_task)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors

    # The stopper's five records were of a task it gave back (every task holds 10 or more):
    # the others read that task whole. Every record once a pass, as done tasks.
    assert len(stopped) == 5
    counts = collections.Counter(plain + by_pass[0] + by_pass[1])
    assert set(counts) == set(ALL) and set(counts.values()) == {2}, \
        [r for r, n in counts.items() if n != 2][:5]
    for records in by_pass.values():
        assert len(records) == len(set(records))
    assert {task.state for task in read} == {"done"}

    tasks = tasks_of()
    assert len(tasks) == 2 * 28 and {t.state for t in tasks} == {"done"}
    given_back = [t for t in tasks if t.attempts == 2]
    assert len(given_back) == 1 and given_back[0].failures == 0  # not counted against it
    assert given_back[0].trainer != 2  # done by another trainer
    assert reasons("waiting") == [
        f"task {given_back[0].index} of pass {given_back[0].pass_no + 1} dispatched again: "
        "trainer-2 gave it back (given back: the trainer stopped reading after 5 records of "
        "the task (the reader was closed))"]
    assert lease_threads() == []


def test_an_exception_in_the_loop_fails_the_task_with_its_text(live_portal, dataset):
    url, token = submit(live_portal, dataset=f"{DATA}/part-[01].recordio")
    with pytest.raises(ValueError, match="a bad batch"), \
            master.reader(url, token, 0) as records:
        for number, _ in enumerate(records):
            if number == 3:
                raise ValueError("a bad batch")
    failed = [t for t in tasks_of() if t.failures]
    assert [(t.index, t.state, t.failures) for t in failed] == [(0, "waiting", 1)]
    assert reasons("waiting") == [
        "task 0 of pass 1 failed on trainer-0 (ValueError: a bad batch); dispatched again"]

    # task by task, in a with block: the same
    with pytest.raises(KeyError), master.tasks(url, token, 1) as tasks:
        for task in tasks:
            for _ in task:
                raise KeyError("no such feature")
    assert reasons("waiting")[-1] == ("task 0 of pass 1 failed on trainer-1 (KeyError: 'no "
                                      "such feature'); dispatched again")
    # A task failing thrice is set aside; the reader goes on with the rest.
    tasks = master.tasks(url, token, 2)  # kept: the iterator gives its task back as it goes
    task = next(tasks)
    assert task.failed("RuntimeError: out of memory") == {"set_aside": True}
    tasks.close()
    assert list(master.reader(url, token, 0)) == SECOND
    assert [(t.index, t.state) for t in tasks_of()] == [(0, "set_aside"), (1, "done")]
    assert lease_threads() == []


def test_a_task_left_half_read_is_given_back_when_the_next_is_asked_for(live_portal,
                                                                       dataset):
    url, token = submit(live_portal, dataset=f"{DATA}/part-[01].recordio")
    tasks = master.tasks(url, token, 0)
    first = next(tasks)
    for record in first:
        assert record == FIRST[0]
        break
    assert first.state == "held"  # until the next task is asked for
    again = next(tasks)
    assert (first.state, again.id, again["index"]) == ("failed", first.id, 0)
    assert reasons("waiting") == ["task 0 of pass 1 dispatched again: trainer-0 gave it back "
                                  "(given back: the trainer asked for the next task after "
                                  "reading 1 record of this one, without reporting it done)"]
    assert list(again) == FIRST and again.state == "held"
    assert Task.objects.get(pk=again.id).state == "leased"  # what follows the records first
    # A trainer that reads the spans itself says when it is done.
    last = next(tasks)
    assert again.state == "done"
    assert list(master.read_spans(last.spans)) == SECOND
    assert last.done() and last.state == "done"
    assert list(tasks) == []
    assert [(t.state, t.attempts, t.failures) for t in tasks_of()] == [("done", 2, 0),
                                                                      ("done", 1, 0)]
    with pytest.raises(RuntimeError, match=r"task \d+ \(pass 1, index 0\) is failed: it is "
                                           "no longer this trainer's"):
        iter(first)
    assert lease_threads() == []


def test_a_task_whose_checkpoint_fails_is_not_done(live_portal, dataset):
    url, token = submit(live_portal, dataset=f"{DATA}/part-0.recordio")
    with pytest.raises(OSError, match="disk full"), master.tasks(url, token, 0) as tasks:
        for task in tasks:
            assert list(task) == FIRST
            raise OSError(28, "disk full")  # saving the checkpoint, after the last record
    assert [(t.state, t.failures) for t in tasks_of()] == [("waiting", 1)]
    assert reasons("waiting") == ["task 0 of pass 1 failed on trainer-0 (OSError: [Errno 28] "
                                  "disk full); dispatched again"]
    assert lease_threads() == []


def test_a_trainer_may_say_when_a_task_is_done(live_portal, dataset):
    url, token = submit(live_portal, dataset=f"{DATA}/part-[01].recordio")
    committed = []
    with master.tasks(url, token, 0, auto_done=False, decode=bytes.decode) as tasks:
        for task in tasks:
            records = list(task)
            assert task.state == "held"  # read, not done yet
            if task["index"] == 1:
                break  # not committed: given back
            if task.done():
                committed.append((task["index"], len(records), records[0]))
    assert committed == [(0, 250, "record-0000")]
    assert [(t.state, t.failures) for t in tasks_of()] == [("done", 0), ("waiting", 0)]
    assert reasons("waiting") == [
        "task 1 of pass 1 dispatched again: trainer-0 gave it back (given back: the trainer "
        "stopped after reading all 250 records of the task, without reporting it done (the "
        "reader was closed))"]
    assert lease_threads() == []


def test_a_trainer_that_must_not_block_is_given_none_while_others_hold_the_pass(
        live_portal, dataset):
    """tasks(block=False), as a collective trainer reads: where the master says wait, None at
    once (the trainer steps on with the others), the master asked again at the next next()."""
    url, token = submit(live_portal, dataset=f"{DATA}/part-[01].recordio", passes=2)
    ones = master.tasks(url, token, 0, auto_done=False, block=False)
    twos = master.tasks(url, token, 1, auto_done=False, block=False)
    first, second = next(ones), next(twos)
    assert (first["pass"], first["index"], second["pass"], second["index"]) == (0, 0, 0, 1)
    assert list(first) == FIRST and first.done()
    began = time.monotonic()
    assert [next(ones), next(ones)] == [None, None]  # pass 0's last task is trainer 1's
    assert time.monotonic() - began < 0.9  # not the master's 1 s wait, twice
    assert list(second) == SECOND and second.done()
    third = next(ones)  # the next pass, as soon as it is asked for
    assert (third["pass"], third["index"]) == (1, 0) and third.state == "held"
    fourth = next(twos)
    assert (fourth["pass"], fourth["index"]) == (1, 1)
    assert list(third) == FIRST and third.done() and list(fourth) == SECOND and fourth.done()
    assert list(ones) == [] and list(twos) == []  # every pass over: the iterators end
    assert [(t.pass_no, t.state, t.attempts) for t in tasks_of()] == [
        (0, "done", 1), (0, "done", 1), (1, "done", 1), (1, "done", 1)]
    assert lease_threads() == []


def test_a_lease_is_renewed_while_the_trainer_reads(live_portal, dataset, settings, caplog):
    settings.PADDLECLOUD_MASTER_LEASE_SECONDS = 2  # renewed every 2/3 s
    url, token = submit(live_portal, dataset=f"{DATA}/part-[01].recordio")
    records = master.reader(url, token, 0)
    first = next(records)
    time.sleep(2.5)  # longer than the lease: only renewals keep it
    other = master.Master(url, token, 1).next()["task"]
    assert other["index"] == 1  # not trainer 0's task, which it still holds
    assert first + b"".join(records.__next__() for _ in range(249)) == b"".join(FIRST)
    done_by_other = master.Master(url, token, 1).done(other["id"], other["lease"])
    assert done_by_other == {"done": True}
    assert list(records) == []  # 0's task done, and the master says done
    assert [(t.state, t.trainer, t.attempts) for t in tasks_of()] == [("done", 0, 1),
                                                                      ("done", 1, 1)]
    assert warnings_of(caplog) == []
    assert lease_threads() == []


def test_a_lost_lease_is_a_warning_and_the_reader_goes_on(live_portal, dataset, settings,
                                                          caplog):
    settings.PADDLECLOUD_MASTER_LEASE_SECONDS = 2
    url, token = submit(live_portal, dataset=f"{DATA}/part-[01].recordio")
    records = master.reader(url, token, 0)
    got = [next(records)]
    # Trainer 0 "restarted": its new self asks for a task and gets task 1; task 0, which the
    # reader holds, goes back to the queue.
    restarted = master.Master(url, token, 0).next()["task"]
    assert restarted["index"] == 1
    time.sleep(2)  # the reader's next renewal is refused
    got += list(records)
    # It stopped reading task 0 at once, then (asking for the next task, as trainer 0) took
    # task 0 again, read it whole, and then task 1, which its "restarted" self gave back.
    assert got == FIRST[:1] + FIRST + SECOND
    first = tasks_of()[0]
    assert warnings_of(caplog) == [
        f"paddlecloud_sdk.master: task {first.pk} (pass 1, index 0): lease lost (its "
        "renewal was refused): the master gave the task to another trainer; going on with the "
        "next task"]
    assert [(t.state, t.attempts) for t in tasks_of()] == [("done", 2), ("done", 2)]

    # Lost while it was read, found when it is reported done (renewals too rare to notice).
    settings.PADDLECLOUD_MASTER_LEASE_SECONDS = 30
    caplog.clear()
    url, token = submit(live_portal, name="second", dataset=f"{DATA}/part-0.recordio")
    records = master.reader(url, token, 0)
    got = [next(records)]
    master.Master(url, token, 0).next()
    got += list(records)
    assert got == FIRST + FIRST  # read on to its end, then again
    assert warnings_of(caplog)[0].endswith("lease lost (done was refused): the master gave "
                                           "the task to another trainer; going on with the "
                                           "next task")
    assert lease_threads() == []


def test_a_file_that_cannot_be_read_fails_its_task(live_portal, dataset, caplog):
    damaged = dataset / "part-1.recordio"
    data = bytearray(damaged.read_bytes())
    data[30] ^= 0xFF  # in the first chunk's records: its checksum no longer holds
    damaged.write_bytes(bytes(data))
    url, token = submit(live_portal, dataset=f"{DATA}/part-[01].recordio")

    with pytest.raises(recordio.RecordIOError, match="checksum mismatch"):
        list(master.reader(url, token, 0))  # task 0, then task 1: reported, and raised
    assert [(t.state, t.failures) for t in tasks_of()] == [("done", 0), ("waiting", 1)]

    # on_error="skip": reported, logged, and the next task read, until the master sets the
    # task aside (3 failures) and says done.
    assert list(master.reader(url, token, 1, on_error="skip")) == []
    assert [(t.state, t.failures) for t in tasks_of()] == [("done", 0), ("set_aside", 3)]
    assert reasons("set_aside")[0].startswith(
        "task 1 of pass 1 set aside: it failed 3 times, last on trainer-1: RecordIOError: ")
    assert "checksum mismatch" in reasons("set_aside")[0]
    assert len([w for w in warnings_of(caplog) if "going on with the next task" in w]) == 2
    assert lease_threads() == []


def test_a_token_that_is_not_the_jobs(live_portal, dataset):
    url, _ = submit(live_portal, dataset=f"{DATA}/part-0.recordio")
    with pytest.raises(master.MasterError, match="404: no master for this job") as refused:
        next(master.reader(url, "pcm_not-this-one", 0))
    assert refused.value.status == 404

"""Comparing finished jobs parses nothing (issue 39): a job's parsed metrics are kept on disk
in the portal's own var/ (``jobs.metrics_cache.Sidecar``), written by a worker when the job
ends, read by any process of the portal (a fresh cache here stands for another process or a
restarted one), read on when the file grew, never trusted when damaged or made from another
file (parsed again, and written anew), and removed with the job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from django.conf import settings
from django.db import transaction

from jobs.metrics_cache import CACHE, MetricsCache, Sidecar, job_columns
from jobs.models import Job
from jobs.services import job_delete
from jobs.transitions import job_transition
from tests.factories import job_row
from tests.jobs.files import file_at, metrics_path
from tests.polling import wait


def lines(first: int, count: int) -> str:
    """Reports ``first``… as the SDK writes them: a falling loss (lowest at step 7 first), an
    accuracy, and a whole-number epoch."""
    return "".join(json.dumps({"step": s, "time": 1763700000.0 + s, "loss": 1.0 / (1 + s % 8),
                               "acc": s / 100, "epoch": s // 10}) + "\n"
                   for s in range(first, first + count))


def figures(columns) -> dict:
    """What the compare table and the curves show of each metric."""
    return {name: (list(c.step), list(c.value), repr(c.final), c.final_step, c.low, c.low_step,
                   c.high, c.high_step) for name, c in columns.items()}


def expected(tmp_path: Path, count: int) -> dict:
    """The figures of ``count`` lines, parsed afresh from a file of their own, nothing kept."""
    path = tmp_path / f"expected-{count}.jsonl"
    path.write_text(lines(0, count))
    return figures(MetricsCache().columns(file_at(path), 1000))


def test_a_kept_parse_answers_a_fresh_cache_and_is_read_on_as_the_file_grows(tmp_path):
    path = tmp_path / "metrics.jsonl"
    line_50 = lines(50, 1)
    path.write_text(lines(0, 50) + line_50[:15])  # the last line still being written
    sidecar, file = Sidecar(tmp_path / "var" / "job.metrics"), file_at(path)
    first = MetricsCache()
    assert figures(first.columns(file, 1000, sidecar)) == expected(tmp_path, 50)
    assert first.lines_parsed == 50 and sidecar.path.exists()

    again = MetricsCache()  # another process, or the portal restarted
    assert figures(again.columns(file, 1000, sidecar)) == expected(tmp_path, 50)
    assert again.lines_parsed == 0

    with path.open("a") as f:  # the job writes on: the half line ended, 19 more
        f.write(line_50[15:] + lines(51, 19))
    on = MetricsCache()
    assert figures(on.columns(file, 1000, sidecar)) == expected(tmp_path, 70)
    assert on.lines_parsed == 20  # from where the kept parse stopped
    kept = MetricsCache()
    assert figures(kept.columns(file, 1000, sidecar)) == expected(tmp_path, 70)
    assert kept.lines_parsed == 0  # what was read on is kept too


@pytest.mark.parametrize("damage", ["a byte flipped", "cut short", "empty", "not one"])
def test_a_damaged_sidecar_is_ignored_and_written_anew(tmp_path, damage):
    path = tmp_path / "metrics.jsonl"
    path.write_text(lines(0, 40))
    sidecar, file = Sidecar(tmp_path / "job.metrics"), file_at(path)
    MetricsCache().columns(file, 1000, sidecar)
    data = bytearray(sidecar.path.read_bytes())
    if damage == "a byte flipped":  # in the middle of the values: only the CRC tells
        data[len(data) * 3 // 4] ^= 0x40
    elif damage == "cut short":
        data = data[:len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"loss,acc\n1,2\n")
    sidecar.path.write_bytes(bytes(data))

    cache = MetricsCache()
    assert figures(cache.columns(file, 1000, sidecar)) == expected(tmp_path, 40)
    assert cache.lines_parsed == 40  # parsed again, not read from the damaged one
    rebuilt = MetricsCache()
    assert figures(rebuilt.columns(file, 1000, sidecar)) == expected(tmp_path, 40)
    assert rebuilt.lines_parsed == 0  # and kept again


def test_a_sidecar_of_another_file_or_of_a_file_since_rewritten_is_not_trusted(tmp_path):
    mine, theirs = tmp_path / "a" / "metrics.jsonl", tmp_path / "b" / "metrics.jsonl"
    mine.parent.mkdir()
    theirs.parent.mkdir()
    mine.write_text(lines(0, 30))
    theirs.write_text(lines(0, 45))
    kept, planted = Sidecar(tmp_path / "a.metrics"), Sidecar(tmp_path / "b.metrics")
    MetricsCache().columns(file_at(theirs), 1000, planted)
    shutil.copy(planted.path, kept.path)  # another file's parse, whole and valid
    cache = MetricsCache()
    assert figures(cache.columns(file_at(mine), 1000, kept)) == expected(tmp_path, 30)
    assert cache.lines_parsed == 30

    # The file replaced by another (a job of the same name writing anew): parsed again.
    replacement = mine.with_suffix(".new")
    replacement.write_text(lines(0, 20))
    replacement.replace(mine)
    cache = MetricsCache()
    assert figures(cache.columns(file_at(mine), 1000, kept)) == expected(tmp_path, 20)
    assert cache.lines_parsed == 20


@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_an_ended_jobs_metrics_and_they_go_with_the_job(
        token_client, alice, datacenter, pfs_home, celery_worker):
    job = job_row(alice, datacenter, "lr-1", replicas={}, state="running")
    path = metrics_path(job, job.replicas.get(role="trainer", index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lines(0, 200))
    sidecar = Sidecar.of(job.uid)
    assert not sidecar.path.exists()

    with transaction.atomic():
        job_transition(job, "succeeded", "the trainers succeeded")
    wait(sidecar.path.exists, message="no sidecar written for the ended job")
    # In the portal's var/, not in the user's home, where they could write one.
    assert sidecar.path.is_relative_to(settings.VAR_DIR / "cache" / "metrics")
    assert not sidecar.path.is_relative_to(pfs_home)
    assert sidecar.path.parent.stat().st_mode & 0o077 == 0

    CACHE.clear()  # what the portal's processes hold in memory: nothing yet
    parsed = CACHE.lines_parsed
    answer = token_client.get("/api/v1/compare/", {"jobs": "lr-1", "metric": "loss"})
    assert answer.status_code == 200, answer.content
    loss = {row["metric"]: row for row in answer.json()["table"]}["loss"]
    assert (loss["final"], loss["final_step"], loss["best"], loss["best_step"],
            loss["points"]) == (1.0 / (1 + 199 % 8), 199, 1.0 / 8, 7, 200)
    assert CACHE.lines_parsed == parsed  # the first comparison parsed nothing

    job_delete(alice, datacenter, "lr-1")
    assert not Job.objects.filter(pk=job.pk).exists()
    wait(lambda: not sidecar.path.exists(), message="the deleted job's sidecar is still there")
    assert path.exists()  # its output stays in the user's home


@pytest.mark.django_db(transaction=True)
def test_the_reconciler_removes_what_was_kept_of_jobs_deleted_while_no_worker_did(
        alice, datacenter, pfs_home, held_tasks):
    from jobs.tasks import jobs_reconcile

    kept, lost = (job_row(alice, datacenter, name, replicas={}, state="succeeded")
                  for name in ("kept", "lost"))
    for job in (kept, lost):
        path = metrics_path(job, job.replicas.get(role="trainer", index=0))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(lines(0, 5))
        job_columns(job)  # compared once: kept
        assert Sidecar.of(job.uid).path.exists()
    Job.objects.filter(pk=lost.pk).delete()  # its removal's task lost

    assert jobs_reconcile()["sidecars"] == 1
    assert Sidecar.of(kept.uid).path.exists()
    assert not Sidecar.of(lost.uid).path.exists()

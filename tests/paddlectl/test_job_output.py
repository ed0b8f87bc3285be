"""A job's files end to end: the package uploaded with paddlectl, the job run by a real Celery
worker on the local backend, its output listed and downloaded with paddlectl."""

from __future__ import annotations

import time

import pytest

from tests.factories import HOME

TRAINER = """\
import os
out = os.environ["PADDLE_OUTPUT_DIR"]
with open(os.path.join(out, "model-%s.txt" % os.environ["TRAINER_ID"]), "w") as f:
    f.write("weights of trainer %s\\n" % os.environ["TRAINER_ID"])
print("trainer", os.environ["TRAINER_ID"], "trained", flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_a_jobs_output_is_listed_and_downloaded(live_cli, celery_worker):
    package = live_cli.cwd / "pkg"
    package.mkdir()
    (package / "train.py").write_text(TRAINER)
    uploaded = live_cli("cp", "-r", "pkg", f"{HOME}/")
    assert uploaded.returncode == 0, uploaded.stderr
    assert (live_cli.portal.home / "pkg" / "train.py").read_text() == TRAINER

    http = live_cli.portal.session()
    jobs = f"{live_cli.portal.url}/api/v1/jobs/"
    response = http.post(jobs, json={"name": "out", "package": f"{HOME}/pkg",
                                     "entry": "python train.py", "trainers": 2})
    assert response.status_code == 201, response.text
    deadline = time.monotonic() + 60
    while (state := http.get(f"{jobs}out/").json()["state"]) not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, f"the job stayed {state}"
        time.sleep(0.2)
    assert state == "succeeded"

    output = f"{HOME}/jobs/out/output"
    listing = live_cli("ls", "-R", output)
    assert listing.returncode == 0, listing.stderr
    names = listing.stdout.split()
    for name in ("model-0.txt", "model-1.txt", "node_0/train.log", "node_1/train.log"):
        assert any(line.rstrip("/").endswith(name) for line in names), (name, names)

    # Like cp -r: into a new directory "results", or as "output" inside an existing one.
    downloaded = live_cli("cp", "-r", output, "results")
    assert downloaded.returncode == 0, downloaded.stderr
    assert live_cli("cp", "-r", output, "results").returncode == 0
    local = live_cli.cwd / "results"
    assert (local / "output" / "model-0.txt").read_text() == "weights of trainer 0\n"
    assert (local / "model-1.txt").read_text() == "weights of trainer 1\n"
    assert "trainer 0 trained" in (local / "node_0" / "train.log").read_text()

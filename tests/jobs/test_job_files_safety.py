"""Nothing a job leaves in its owner's home makes the portal read, write or remove anything
outside that home (issue 14, findings 1 and 2), on both backends.

A job can plant anything in the home it writes: a link where its log was, a link in place of
``jobs/<name>`` or of its output directory, a FIFO. The portal acts with its own privileges,
so it must never follow any of them. Two tests hold that for every path of a job:

- the portal's own file operations, watched with an audit hook through a job's whole life
  (submitted over HTTP, run by a Celery worker, its logs and metrics read through the API,
  the WebSockets, the job page and the download), never name a path inside a home: every one
  goes through ``jobs.files`` (directory descriptors, no link followed);
- at every path a job run leaves (found by walking it, not listed by hand), links to another
  user's files, to the portal's key file and to ``/proc/self/environ`` are planted in turn,
  and every way the portal reads and writes a job's files is exercised: no secret comes back
  and nothing outside the home changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.test import Client

from jobs.backends import backend_for
from jobs.backends.base import BackendError
from jobs.backends.kubernetes import pods
from jobs.files import home_remove, output_open, output_prepare
from jobs.models import Job
from kernel.errors import PaddleCloudError
from tests.factories import package_write
from tests.kube import datacenter_set, portal_kubeconfig
from tests.polling import wait
from tests.ws import ws_messages

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

TRAINER = textwrap.dedent("""\
    from paddlecloud_sdk import report

    for step in range(3):
        print(f"step {step}", flush=True)
        report(step=step, loss=1 / (step + 1))
    """)
BOB_SECRET = "BOB-SECRET-0c9f"
KEY_SECRET = "FERNET-SECRET-7d21"
ENVIRON_SECRET = os.environb.get(b"PATH", b"PATH").decode()  # in /proc/self/environ


@pytest.fixture(params=["local", "kubernetes"])
def backend(request, live_portal, settings):
    """datacenter1 on the local backend, or on the fake API server with its PFS as the pods'
    hostPath (their containers append their output to the log in it, as the real start
    script does)."""
    if request.param == "kubernetes":
        k8s_api = request.getfixturevalue("k8s_api")
        settings.PADDLECLOUD_KUBE_TIMEOUT = 2
        pfs = settings.PADDLECLOUD_PFS_ROOT / "datacenter1"
        datacenter_set(live_portal.datacenter, backend="kubernetes",
                       kubeconfig=str(portal_kubeconfig(k8s_api)),
                       kube_volume={"hostPath": {"path": str(pfs)}})
        k8s_api.controller.script_pods("*-tr-*", lines=[f"step {i}" for i in range(3)],
                                       exit_code=0)
        request.addfinalizer(lambda: _kube_stop())
    return request.param


def _kube_stop():
    from jobs.backends.kubernetes.client import kube_forget
    from jobs.backends.kubernetes.pods_watch import pod_caches_stop

    pod_caches_stop()
    kube_forget()


@pytest.fixture
def secrets(live_portal, make_user, settings):
    """What alice must never read: bob's file, the portal's key file, its environment."""
    make_user("bob")
    bob = live_portal.home.parent / "bob"
    (bob / "jobs" / "fit" / "output").mkdir(parents=True)
    (bob / "secret.txt").write_text(BOB_SECRET)
    (bob / "jobs" / "fit" / "output" / "model").write_text(BOB_SECRET)
    keys = Path(settings.VAR_DIR) / "credential_keys"
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.write_text(KEY_SECRET)
    return {"bob": bob, "keys": keys}


def run_job(portal, backend: str) -> Job:
    """A job run to success: its log, its metrics and its output exist."""
    response = portal.job_post("fit")
    assert response.status_code == 201, response.text
    job = Job.objects.get(name="fit")
    wait(lambda: Job.objects.get(pk=job.pk).state in ("succeeded", "failed"), timeout=60,
         message="the job to end")
    job.refresh_from_db()
    assert job.state == "succeeded", job.state_reason
    if backend == "kubernetes":  # as a trainer calling report() in its pod would have
        metrics = portal.home / "jobs" / "fit" / "output" / "node_0" / "metrics.jsonl"
        with unwatched():  # the pod, not the portal
            metrics.write_text('{"step": 0, "loss": 1.0}\n')
        # Logs come from PFS once the pods are gone (from the pods before): delete them as
        # the job's TTL would.
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=0)
        wait(lambda: backend_for(job.datacenter).log_stream(
            job, job.replicas.get(), follow=False, tail=None) is None,
            message="the job's pods to go")
    return job


def read_everything(portal) -> list[str]:
    """Every way alice reads her job's files: what each answered, as text."""
    api = portal.session()
    browser = requests.Session()
    client = Client()
    client.force_login(portal.user)
    browser.cookies.set("sessionid", client.cookies["sessionid"].value)
    url = f"{portal.url}/api/v1/jobs/fit"
    answers = [api.get(f"{url}/logs", timeout=20).text,
               api.get(f"{url}/logs", params={"tail": 3}, timeout=20).text,
               api.get(f"{url}/logs", params={"follow": 1}, timeout=20).text,
               api.get(f"{url}/metrics", timeout=20).text,
               browser.get(f"{portal.url}/jobs/fit", timeout=20).text,
               browser.get(f"{portal.url}/jobs/fit/logs/trainer-0.log", timeout=20).text]
    for kind in ("logs", "metrics"):
        answers.append(json.dumps(ws_messages(portal, f"/ws/jobs/fit/{kind}/")))
    return answers


def write_everything(job: Job) -> None:
    """Every way the portal writes a job's files: the output of a new job of the same name
    prepared, its log opened, the Kubernetes clean-up of installed requirements."""
    again = Job(owner=job.owner, datacenter=job.datacenter, name=job.name,
                package=job.package, entry=job.entry)
    with contextlib.suppress(BackendError):
        output_prepare(again)
    with contextlib.suppress(BackendError):
        os.close(output_open(again, "node_0/train.log"))
    site = "/".join(pods.site_packages_rel(job))
    with contextlib.suppress(PaddleCloudError):
        home_remove(job, site)


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file under ``roots`` (links not followed) and a digest of what it holds, but
    the portal's cache of jobs' parsed metrics, which it writes as it reads them (its files
    are checked for secrets instead: ``cache_holds_no_secret``)."""
    seen = {}
    cache = Path(settings.PADDLECLOUD_METRICS_CACHE_DIR)
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                if path == cache or cache in path.parents or path in cache.parents:
                    continue
                if path.suffix == ".follow" and path.parent.name == "run":
                    continue  # a local runner's follower mark, gone once its job has ended
                seen[str(path)] = ("link:" + os.readlink(path) if path.is_symlink() else
                                   "dir" if path.is_dir() else
                                   hashlib.sha256(path.read_bytes()).hexdigest())
    return seen


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def job_paths(home: Path, job: Job) -> list[Path]:
    """Every path a job run left in the home (walked, not listed by hand), and where the
    Kubernetes clean-up looks."""
    paths = [home / "jobs", home / "jobs" / "fit"]
    for dirpath, dirnames, filenames in os.walk(home / "jobs" / "fit"):
        paths += [Path(dirpath) / name for name in sorted(dirnames + filenames)]
    site = "/".join(pods.site_packages_rel(job))
    return [*dict.fromkeys([*paths, home / site])]


def test_links_planted_at_every_path_of_a_job_are_never_followed(live_portal, celery_worker,
                                                                 backend, secrets):
    home = live_portal.home
    package_write(live_portal.home, TRAINER)
    job = run_job(live_portal, backend)
    paths = job_paths(home, job)
    assert {p.name for p in paths} >= {"output", "train.log", "metrics.jsonl",
                                       ".paddlecloud-job", "node_0"}
    pristine = home.parent / "pristine-jobs"
    shutil.copytree(home / "jobs", pristine, symlinks=True)
    outside = snapshot(secrets["bob"], secrets["keys"].parent)
    for path in paths:
        targets = [os.path.relpath(secrets["bob"], path.parent),
                   str(secrets["bob"] / "secret.txt"), "/proc/self/environ",
                   str(secrets["keys"])]
        for target in targets:
            remove(home / "jobs")
            shutil.copytree(pristine, home / "jobs", symlinks=True)
            remove(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
            where = f"{path.relative_to(home)} -> {target}"
            for answer in read_everything(live_portal):
                for secret in (BOB_SECRET, KEY_SECRET, ENVIRON_SECRET):
                    assert secret not in answer, f"{where}: {secret} was read"
            write_everything(job)
            assert snapshot(secrets["bob"], secrets["keys"].parent) == outside, \
                f"{where}: something outside alice's home changed"
            cache_holds_no_secret(where)


def cache_holds_no_secret(where: str) -> None:
    """What the portal keeps of jobs' metrics (``jobs.metrics_cache``) holds no secret."""
    for kept in Path(settings.PADDLECLOUD_METRICS_CACHE_DIR).glob("**/*"):
        if kept.is_file():
            held = kept.read_bytes()
            for secret in (BOB_SECRET, KEY_SECRET, ENVIRON_SECRET):
                assert secret.encode() not in held, f"{where}: {secret} was kept in {kept}"


# -- the portal names no path inside a home --------------------------------------------------

WATCHED = {"open": (0,), "os.listdir": (0,), "os.scandir": (0,), "os.rename": (0, 1),
           "os.replace": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,),
           "os.symlink": (1,), "os.link": (0, 1), "os.chmod": (0,), "os.chown": (0,),
           "os.utime": (0,), "os.truncate": (0,), "shutil.rmtree": (0,),
           "shutil.copytree": (0, 1), "shutil.copyfile": (0, 1)}
_audit = {"homes": None, "seen": [], "lock": threading.Lock()}


def _hook(event, args):
    homes = _audit["homes"]
    if homes is None or event not in WATCHED:
        return
    for index in WATCHED[event]:
        path = args[index] if index < len(args) else None
        if isinstance(path, int) or path is None:
            continue
        path = os.path.abspath(os.fsdecode(path)) if os.path.isabs(os.fsdecode(path)) else None
        if path is None or not any(path.startswith(home + os.sep) for home in homes):
            continue
        frame = sys._getframe(1)
        while frame is not None:  # the fake kubelet is a pod writing its log: not the portal
            if f"{os.sep}k8s_api_server{os.sep}" in frame.f_code.co_filename:
                return
            frame = frame.f_back
        with _audit["lock"]:
            _audit["seen"].append(f"{event} {path}")


sys.addaudithook(_hook)  # for the whole run (hooks cannot be removed); idle unless watching


@contextlib.contextmanager
def watching(*homes: Path):
    _audit["seen"].clear()
    _audit["homes"] = [str(home) for home in homes]
    try:
        yield _audit["seen"]
    finally:
        _audit["homes"] = None


@contextlib.contextmanager
def unwatched():
    homes, _audit["homes"] = _audit["homes"], None
    try:
        yield
    finally:
        _audit["homes"] = homes


def test_the_portal_names_no_path_inside_a_home(live_portal, celery_worker, backend, secrets):
    """Through a job's whole life every file operation of the portal in the home goes
    through directory descriptors (``jobs.files``); none hands the kernel a path
    that a planted link could redirect."""
    home = live_portal.home
    package_write(live_portal.home, TRAINER)
    with watching(home, secrets["bob"]) as seen:
        job = run_job(live_portal, backend)
        read_everything(live_portal)
        write_everything(job)
        response = live_portal.session().delete(f"{live_portal.url}/api/v1/jobs/fit/")
        assert response.status_code == 204, response.text
        wait(lambda: not Job.objects.filter(pk=job.pk).exists(), message="the job to go")
    assert seen == [], "the portal opened paths inside a home:\n" + "\n".join(seen)
    # The run's log was written, and kept beside the output a new job of the name prepared.
    kept = home / "jobs" / "fit" / f"output-{job.uid}" / "node_0" / "train.log"
    assert kept.read_text().startswith("step 0\n")


def test_a_fifo_in_place_of_the_log_is_refused_without_waiting(live_portal, celery_worker,
                                                              secrets):
    package_write(live_portal.home, TRAINER)
    job = run_job(live_portal, "local")
    log = live_portal.home / "jobs" / "fit" / "output" / "node_0" / "train.log"
    log.unlink()
    os.mkfifo(log)
    started = time.monotonic()
    response = live_portal.session().get(f"{live_portal.url}/api/v1/jobs/fit/logs", timeout=20)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "not_a_file"
    assert "train.log is not a regular file" in response.json()["message"]
    messages = ws_messages(live_portal, "/ws/jobs/fit/logs/")
    assert messages[0]["type"] == "error" and messages[0]["code"] == "not_a_file"
    assert time.monotonic() - started < 15
    assert job.replicas.get().state == "succeeded"


def test_a_link_where_the_log_is_is_refused_with_the_reason(live_portal, celery_worker,
                                                            secrets):
    package_write(live_portal.home, TRAINER)
    run_job(live_portal, "local")
    log = live_portal.home / "jobs" / "fit" / "output" / "node_0" / "train.log"
    log.unlink()
    log.symlink_to(secrets["bob"] / "secret.txt")
    response = live_portal.session().get(f"{live_portal.url}/api/v1/jobs/fit/logs", timeout=20)
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["code"] == "link_refused"
    assert "/pfs/datacenter1/home/alice/jobs/fit/output/node_0/train.log" in body["message"]
    assert "symbolic link" in body["message"]
    messages = ws_messages(live_portal, "/ws/jobs/fit/logs/")
    assert [m["type"] for m in messages] == ["error"] and messages[0]["code"] == "link_refused"


def test_submitting_through_a_link_to_another_home_is_refused_and_leaves_it(
        live_portal, celery_worker, backend, secrets):
    """Finding 2: ``jobs/fit -> ../../bob/jobs/fit`` made the portal rename bob's output. The
    job's package snapshot, taken in ``jobs/fit`` at submission (issue 39), follows no link:
    the submission is refused naming the package, and nothing of bob's is touched."""
    home = live_portal.home
    (home / "jobs").mkdir()
    (home / "jobs" / "fit").symlink_to(os.path.relpath(secrets["bob"] / "jobs" / "fit",
                                                       home / "jobs"))
    before = snapshot(secrets["bob"])
    package_write(live_portal.home, TRAINER)
    response = live_portal.job_post("fit")
    assert response.status_code == 400, response.text
    body = response.json()
    assert list(body["fields"]) == ["package"]
    assert body["fields"]["package"][0].startswith(
        "cannot take its snapshot in /pfs/datacenter1/home/alice/jobs/fit/package: ")
    assert "symbolic link" in body["message"]
    assert not Job.objects.filter(name="fit").exists()
    assert snapshot(secrets["bob"]) == before

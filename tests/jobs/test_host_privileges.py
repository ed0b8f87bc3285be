"""A local job never holds the host's root (issue 33, items 1 and 2), on a portal that runs as
root as ``./dev up`` runs it: a real job, run by a real Celery worker in its real sandbox,
tries every file under ``/proc/sys`` and ``/sys`` for writing (a write to
``kernel/core_pattern`` would run a program of its choosing as root) and the rest of
``/proc``, and leaves a set-uid copy of ``id`` in its owner's home, which a host user then
runs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from jobs.backends.local import backend as local
from jobs.files import home_dir, output_dir
from jobs.models import Job
from jobs.services import job_submit
from tests.factories import PACKAGE, package_write
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis,
              pytest.mark.skipif(os.geteuid() != 0, reason="what a root portal's jobs hold "
                                                           "(CI and ./dev run as root)")]

NOBODY = 65534

# Opens every file for writing (writes nothing: an open is enough to know), reports which
# opened, how /proc is mounted, and leaves set-uid and set-gid copies of id in the home.
HOSTILE = textwrap.dedent("""\
    import json, os, shutil

    def writable(top):
        tried, opened = 0, []
        for where, _, files in os.walk(top):
            for name in files:
                path = os.path.join(where, name)
                if os.path.islink(path):  # /proc/self/fd/*: its own open files
                    continue
                tried += 1
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                    opened.append(path)
                except OSError:
                    pass
        return tried, opened

    found = {"uid": os.getuid()}
    found["sys_tried"], found["sys_opened"] = writable("/sys")
    found["proc_sys_tried"], found["proc_sys_opened"] = writable("/proc/sys")
    found["proc_self_opened"] = writable("/proc/self")[1]
    with open("/proc/self/mountinfo") as f:
        found["proc_mount"] = [line.split()[5] for line in f if line.split()[4] == "/proc"]
    home = os.environ["PADDLE_PFS_HOME"]
    with open("/proc/self/mountinfo") as f:
        found["home_mount"] = [line.split()[5] for line in f if line.split()[4] == home]
    for name, mode in (("suid-id", 0o4755), ("sgid-id", 0o2755)):
        shutil.copy("/usr/bin/id", os.path.join(home, name))
        os.chmod(os.path.join(home, name), mode)
    print("FOUND " + json.dumps(found), flush=True)
    """)


def run_as_host_user(path, *args: str) -> subprocess.CompletedProcess:
    """Run ``path`` as a host user who can reach it (nobody, given the file open: a home on a
    world-traversable PFS, as before), honouring its set-uid and set-gid bits."""
    code = textwrap.dedent(f"""\
        import os
        fd = os.open({str(path)!r}, os.O_RDONLY)
        os.setgroups([])
        os.setgid({NOBODY})
        os.setuid({NOBODY})
        os.execve(fd, ["id", *{list(args)!r}], {{}})
        """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, check=False)


@pytest.fixture
def hostile_job(celery_worker, alice, datacenter, pfs_home):
    package_write(pfs_home, HOSTILE)
    job = job_submit(alice, datacenter, {"name": "hostile", "entry": "python train.py",
                                         "package": PACKAGE}).job
    wait(lambda: Job.objects.get(pk=job.pk).state in ("succeeded", "failed"), timeout=120,
         message="the job to end")
    job.refresh_from_db()
    yield job
    local.LocalBackend().stop(job, list(job.replicas.all()), grace=1)
    local.LocalBackend().cleanup(job)


def found(job) -> dict:
    import json

    log = (output_dir(job) / "node_0" / "train.log").read_text()
    lines = [line for line in log.splitlines() if line.startswith("FOUND ")]
    assert lines, log
    return json.loads(lines[-1][6:])


def test_a_job_can_write_no_kernel_setting_nor_anything_of_proc(hostile_job):
    assert local.sandboxing() is None, "this machine must make sandboxes (./dev installs bwrap)"
    assert hostile_job.state == "succeeded", hostile_job.state_reason
    seen = found(hostile_job)
    assert seen["proc_sys_tried"] > 100  # it saw the kernel's settings...
    assert seen["proc_sys_opened"] == []  # ...and could open none of them to write
    assert seen["sys_opened"] == []
    assert seen["proc_self_opened"] == []
    assert seen["proc_mount"] and all("ro" in options.split(",")
                                      for options in seen["proc_mount"])


def test_what_a_job_leaves_set_uid_gives_nobody_root(hostile_job, alice):
    assert hostile_job.state == "succeeded", hostile_job.state_reason
    uid, gid = local.home_ids(alice)
    home = home_dir(hostile_job)
    # Bound nosuid and nodev: in the job, its set-uid files give it nothing either.
    options = found(hostile_job)["home_mount"][-1].split(",")
    assert {"rw", "nosuid", "nodev"} <= set(options), options
    for name in ("suid-id", "sgid-id"):
        st = (home / name).stat()
        assert (st.st_uid, st.st_gid) == (uid, gid)  # its owner's host ids, never root's
    assert run_as_host_user(home / "suid-id", "-u").stdout.split() == [str(uid)]
    assert run_as_host_user(home / "sgid-id", "-g").stdout.split() == [str(gid)]
    # And no other host user may enter the home at all.
    st = home.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700)
    # What the portal writes there for a job (its output, its logs) is the owner's too.
    assert (output_dir(hostile_job)).stat().st_uid == uid

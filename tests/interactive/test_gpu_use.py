"""Whether a notebook's GPUs are computing, as the idle check asks it: ``nvidia-smi`` run in
the running replica as the replica runs (``Backend.exec_open``). This machine has no GPU, so
the replica's ``nvidia-smi`` is a stand-in on its PATH that prints what the test wrote, in
nvidia-smi's own format (one utilisation a GPU, in %); everything else is real: a sandboxed
local job run by a Celery worker, the command entered into its sandbox."""

from __future__ import annotations

import asyncio
import sys

import pytest

from interactive.sessions import gpus_in_use
from jobs.backends import backend_for
from tests.factories import home
from tests.interactive.test_exec import running

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis,
              pytest.mark.package("import time; time.sleep(600)\n")]

STAND_IN = """#!/bin/sh
# nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits, as the test says
case "$*" in
  *--query-gpu=utilization.gpu*--format=csv,noheader,nounits*) ;;
  *) echo "not the query the portal asks: $*" >&2; exit 2 ;;
esac
exec cat "$(dirname "$0")/said"
"""


def test_a_gpu_computing_is_use_and_what_cannot_be_read_is_not_known(
        live_portal, celery_worker, submit, pfs_home):
    tools = pfs_home / "gpu-tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(STAND_IN)
    (tools / "nvidia-smi").chmod(0o755)
    said = tools / "said"
    said.write_text("0\n")
    said.chmod(0o644)
    path = f"{home()}/gpu-tools:{sys.prefix}/bin:/usr/bin:/bin"  # the home as the job sees it
    job = running(submit("gpus", env={"PATH": path}))
    bare = running(submit("bare"))  # nvidia-smi is nowhere on its PATH

    def use(of=job):  # as the idle check asks: the records read before, none meanwhile
        return asyncio.run(gpus_in_use(backend_for(of.datacenter), of,
                                       of.replicas.get(index=0, role="trainer")))

    assert use() is False  # one GPU, idle
    said.write_text("0\n37\n")
    assert use() is True  # the second of two computes
    said.write_text("N/A\n")
    assert use() is None  # nothing it reads
    said.unlink()
    assert use() is None  # nvidia-smi failed
    assert use(bare) is None

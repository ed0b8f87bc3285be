"""paddlectl against the live portal whose datacenter runs jobs on Kubernetes: the fake
cluster's process kubelet, whose pods really run. ``logs -f`` shows what the pods print."""

from __future__ import annotations

import re

import pytest

from tests.factories import package_write
from tests.k8s_api_server import fixtures
from tests.kube import on_kubernetes, pfs_volume, portal_kubeconfig

pytestmark = pytest.mark.django_db(transaction=True)
k8s_cluster = fixtures.k8s_cluster

# Each trainer says where it runs (its pod's hostname and IP), three times.
TRAINER = """\
import os, socket, time
for step in range(3):
    print("trainer", os.environ["PADDLE_TRAINER_ID"], "step", step, "on",
          socket.gethostname(), os.environ["POD_IP"], flush=True)
    time.sleep(0.3)
"""


def test_logs_follow_what_the_pods_print(live_cli, celery_worker, k8s_cluster, settings):
    portal = live_cli.portal
    package_write(portal.home, TRAINER, "where")
    with on_kubernetes(portal.datacenter, settings, portal_kubeconfig(k8s_cluster),
                       pfs_volume(portal.home.parents[1]), timeout=5):
        submitted = live_cli("submit", "-jobname", "where", "-parallelism", "2", "-cpu", "1",
                             "-memory", "1Gi", "-entry", "python train.py",
                             "/pfs/datacenter1/home/alice/where")
        assert submitted.returncode == 0, submitted.stderr
        followed = live_cli("logs", "where", "-f", timeout=120)
        assert followed.returncode == 0, followed.stderr
    lines = [line for line in followed.stdout.splitlines() if " step " in line]
    assert len(lines) == 6, followed.stdout
    for index in (0, 1):
        mine = [line for line in lines if line.startswith(f"trainer-{index} | ")]
        assert [line.split(" step ")[1][0] for line in mine] == ["0", "1", "2"]
        # The pod's own hostname (the Indexed Job's <job>-<index>) and its pod-network IP.
        assert re.fullmatch(rf"trainer-{index} \| trainer {index} step 0 on "
                            rf"where-[0-9a-f]{{5}}-tr-{index} 10\.244\.\d+\.\d+", mine[0]), mine

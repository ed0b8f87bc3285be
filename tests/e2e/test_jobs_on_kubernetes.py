"""The job page in Chromium for a job whose datacenter runs on Kubernetes: the fake cluster's
process kubelet, whose pods really run. The live log shows what the pod prints, as it prints
it, and the job ends succeeded."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from jobs.services import job_submit
from tests.e2e.conftest import login
from tests.factories import package_write
from tests.k8s_api_server import fixtures
from tests.kube import on_kubernetes, pfs_volume, portal_kubeconfig

k8s_cluster = fixtures.k8s_cluster

TRAINER = """\
import os, socket, time
for step in range(12):
    print("step", step, "on", socket.gethostname(), os.environ["POD_IP"], flush=True)
    time.sleep(0.25)
print("done", flush=True)
"""


@pytest.fixture
def kube_portal(live_portal, k8s_cluster, settings):
    with on_kubernetes(live_portal.datacenter, settings, portal_kubeconfig(k8s_cluster),
                       pfs_volume(live_portal.home.parents[1]), timeout=5):
        yield live_portal


def test_the_live_log_shows_the_pods_output(page, kube_portal, celery_worker):
    package_write(kube_portal.home, TRAINER, "pod")
    job_submit(kube_portal.user, kube_portal.datacenter, {
        "name": "on-pods", "package": "/pfs/datacenter1/home/alice/pod",
        "entry": "python train.py", "cpu": "1"})
    login(page, next_path="/jobs/on-pods/")
    state = page.locator('#job-state [data-part="label"]')
    expect(state).to_have_text("running", timeout=30_000)
    log = page.locator("#log")
    # A line the pod printed, with its own hostname and pod-network IP, while it runs.
    expect(log).to_contain_text(re.compile(r"step 1 on on-pods-[0-9a-f]{5}-tr-0 10\.244\."),
                                timeout=30_000)
    expect(state).to_have_text("succeeded", timeout=30_000)
    expect(log).to_contain_text("done")
    expect(page.locator("#log .line")).to_have_count(13)

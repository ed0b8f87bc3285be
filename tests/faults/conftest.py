"""The fault suite's fixtures: one deployment for the whole run (``deployment``), brought
back to health before each test (a fault may have left a part stopped or killed), and a
user of its own for each test (``user``), whose jobs are ended after it and must leave
nothing running."""

from __future__ import annotations

import pytest

from .client import QuotaWatch, User
from .deployment import Deployment


@pytest.fixture(scope="session")
def deployment(tmp_path_factory):
    deployment = Deployment(tmp_path_factory.mktemp("faults"))
    try:
        deployment.open()
        yield deployment
    finally:
        deployment.close()


@pytest.fixture
def user(deployment):
    """A fresh user (quota: JOBS_QUOTA jobs) on a deployment whose every part runs."""
    deployment.ensure_up()
    name, info = deployment.user_next()
    user = User(deployment, name, info)
    with QuotaWatch(deployment) as watch:
        user.quota = watch
        yield user
    deployment.ensure_up()
    user.end_all()

"""The suite on several processes (pytest-xdist, ``./dev test`` runs it on one per core).

Loaded with ``-p tests.workers`` (pyproject's addopts) before pytest-django reads the settings,
so that what one worker process changes never reaches another:

- **Redis**: worker ``gwN`` uses database ``D - N`` of ``REDIS_URL`` (``D`` its database, 15 by
  default): its Celery queue, cache and channel layer are its own, and the programs its tests
  start inherit it. PostgreSQL needs nothing: pytest-django gives each worker a database.
- **One worker for what is one of a kind** (``pytest_collection_modifyitems``): the tests on
  the real control plane share one (``real_kube`` is a session fixture: started once per
  process), so they run on the same worker, as the image's tests do (built once a worker) and
  the fault suite's (its deployment: PostgreSQL, Redis, the portal's five processes).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

# Tests that need what there is one of on the machine, and the worker group they share.
ONE_OF_A_KIND = {
    "real_kubernetes": "real-kubernetes",  # the session's control plane and Kueue
    "image": "docker",                     # the portal's image and docker-compose
    "faults": "faults",                    # the fault suite's deployment (tests/faults)
}
ONE_OF_A_KIND_FIXTURES = {"real_kube": "real-kubernetes", "real_kueue": "real-kubernetes"}


def worker_redis_url(url: str, worker: str) -> str:
    """``url`` with the database of worker ``worker`` (``gw0``, ``gw1``…): its own, counted
    down from ``url``'s."""
    index = int(worker.removeprefix("gw"))
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) - index
    if database < 0:
        raise pytest.UsageError(
            f"REDIS_URL {url!r} leaves no Redis database for worker {worker}: each worker "
            f"takes its own, counting down from the URL's (give one of 15, or fewer workers)")
    return urlunsplit(parts._replace(path=f"/{database}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], _worker)


def group_of(item: pytest.Item) -> str | None:
    for mark, group in ONE_OF_A_KIND.items():
        if item.get_closest_marker(mark) is not None:
            return group
    for fixture in item.fixturenames:
        if fixture in ONE_OF_A_KIND_FIXTURES:
            return ONE_OF_A_KIND_FIXTURES[fixture]
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With ``--dist loadgroup``, the tests of a group go to one worker: their node ids end in
    ``@<group>``, which is what the scheduler reads. pytest-xdist 3.8 would add that suffix for
    an ``xdist_group`` mark, but on pytest 9.2 its suffix is lost (it sets a field node ids no
    longer read: pytest-dev/pytest-xdist#1386), so it is set here."""
    if not config.getoption("loadgroup", default=False):  # set in the workers of -n
        return
    for item in items:
        group = group_of(item)
        if group is None:
            continue
        nodeid = f"{item.nodeid}@{group}"
        if hasattr(item, "_id"):  # pytest >= 9.2: structured node ids
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(nodeid)
        else:
            item._nodeid = nodeid

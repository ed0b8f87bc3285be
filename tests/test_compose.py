"""docker-compose.yml describes the full stack. (No Docker engine runs in CI, so this checks
what can be checked without one: the services, and that every command they run exists.)"""

from __future__ import annotations

from pathlib import Path

import yaml
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent


def load() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_full_stack_is_there():
    services = load()["services"]
    assert set(services) == {"postgres", "redis", "web", "worker", "beat"}
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["DEBUG"] == "0"
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://redis:")
        assert set(services[name]["depends_on"]) == {"postgres", "redis"}


def test_commands_name_things_that_exist():
    services = load()["services"]
    commands = get_commands()
    web = services["web"]["command"]
    for word in ("migrate", "runportal"):
        assert f"paddlecloud {word}" in web
        assert word in commands
    assert "--no-worker" in web  # the worker and beat services do that work
    assert services["worker"]["command"].startswith("celery -A paddlecloud worker")
    assert services["beat"]["command"].startswith("celery -A paddlecloud beat")
    dockerfile = (ROOT / "Dockerfile").read_text()
    for path in ("paddlecloud", "accounts", "paddlectl", "templates", "static", "manage.py"):
        assert f"COPY {path} " in dockerfile, path

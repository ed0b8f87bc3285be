"""Settings come from the environment: the embedded default with nothing set, the real parts
with DATABASE_URL / REDIS_URL / PADDLECLOUD_BACKEND, and production checks with DEBUG off.

Each case runs in a fresh interpreter, since Django reads its settings once per process."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest
from django.conf import settings as test_settings

from tests.processes import run_python

PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.db import connection
connection.ensure_connection()
print(json.dumps({
    "vendor": connection.vendor,
    "db_name": str(settings.DATABASES["default"]["NAME"]),
    "channel_layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "cache": settings.CACHES["default"]["BACKEND"],
    "broker": settings.CELERY_BROKER_URL,
    "backend": settings.PADDLECLOUD_BACKEND,
    "pfs_root": str(settings.PADDLECLOUD_PFS_ROOT),
    "debug": settings.DEBUG,
}))
"""


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return run_python(args, tmp_path / "var", **env)


def probe(tmp_path: Path, **env: str) -> dict:
    result = run(["-c", PROBE], tmp_path, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_embedded_default_with_nothing_set(tmp_path):
    found = probe(tmp_path)
    assert found["vendor"] == "sqlite"
    assert found["db_name"] == str(tmp_path / "var" / "paddlecloud.sqlite3")
    assert found["channel_layer"] == "paddlecloud.layers.InProcessChannelLayer"
    assert found["cache"].endswith("LocMemCache")
    assert found["broker"].startswith("memory://")
    assert found["backend"] == "local"
    assert found["pfs_root"] == str(tmp_path / "var" / "pfs")
    # The generated secret key is kept, private, and reused.
    key_file = tmp_path / "var" / "secret_key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert len(key_file.read_text()) >= 50


def test_embedded_default_migrates_a_sqlite_file(tmp_path):
    result = run(["manage.py", "migrate", "--no-input", "-v", "0"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "var" / "paddlecloud.sqlite3").stat().st_size > 0


def test_database_url_switches_to_postgresql(tmp_path):
    db = test_settings.DATABASES["default"]
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/postgres"
    found = probe(tmp_path, DATABASE_URL=url)
    assert found["vendor"] == "postgresql"
    assert found["db_name"] == "postgres"


def test_a_bounded_connection_pool_on_postgresql(tmp_path):
    db = test_settings.DATABASES["default"]
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/postgres"
    pooled = PROBE.replace('"debug": settings.DEBUG,', '"debug": settings.DEBUG, "pool": '
                           'settings.DATABASES["default"]["OPTIONS"].get("pool"),')
    result = run(["-c", pooled], tmp_path, DATABASE_URL=url, DATABASE_POOL_MAX_SIZE="12")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["vendor"] == "postgresql"  # a connection came from the pool
    assert found["pool"] == {"min_size": 1, "max_size": 12, "timeout": 30}
    both = run(["-c", PROBE], tmp_path, DATABASE_URL=url, DATABASE_POOL_MAX_SIZE="12",
               DATABASE_CONN_MAX_AGE="60")
    assert both.returncode != 0 and "DATABASE_CONN_MAX_AGE" in both.stderr


def test_redis_url_switches_broker_channel_layer_and_cache(tmp_path):
    found = probe(tmp_path, REDIS_URL=test_settings.REDIS_URL)
    assert found["broker"] == test_settings.REDIS_URL
    assert found["channel_layer"] == "channels_redis.core.RedisChannelLayer"
    assert found["cache"] == "django.core.cache.backends.redis.RedisCache"


def test_backend_and_pfs_root(tmp_path):
    found = probe(tmp_path, PADDLECLOUD_BACKEND="kubernetes",
                  PADDLECLOUD_PFS_ROOT=str(tmp_path / "mnt"))
    assert found["backend"] == "kubernetes"
    assert found["pfs_root"] == str(tmp_path / "mnt")


@pytest.mark.parametrize(("env", "names"), [
    ({"PADDLECLOUD_BACKEND": "docker"}, "PADDLECLOUD_BACKEND"),
    ({"PADDLECLOUD_LOCAL_SANDBOX": "yes"}, "PADDLECLOUD_LOCAL_SANDBOX"),
    ({"DEBUG": "maybe"}, "DEBUG"),
    ({"DEBUG": "0"}, "SECRET_KEY"),
    ({"DATABASE_URL": "nonsense://x"}, "DATABASE_URL"),
    ({"DATABASE_POOL_MAX_SIZE": "10"}, "DATABASE_POOL_MAX_SIZE"),  # SQLite
    ({"PADDLECLOUD_SESSIONS_DOMAIN": "*.sessions.example.com"}, "PADDLECLOUD_SESSIONS_DOMAIN"),
    ({"PADDLECLOUD_SESSIONS_DOMAIN": "https://sessions.example.com"},
     "PADDLECLOUD_SESSIONS_DOMAIN"),
])
def test_bad_configuration_names_the_variable(tmp_path, env, names):
    result = run(["-c", PROBE], tmp_path, **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert names in result.stderr


def production_env(tmp_path) -> dict[str, str]:
    db = test_settings.DATABASES["default"]
    return {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "paddlecloud.example.com",
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:"
                        f"{db['PORT'] or 5432}/postgres",
        "REDIS_URL": test_settings.REDIS_URL,
    }


def test_production_settings_pass_the_deploy_check(tmp_path):
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], tmp_path,
                 **production_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_deploy_check_fails_with_debug_on(tmp_path):
    env = production_env(tmp_path) | {"DEBUG": "1"}
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], tmp_path, **env)
    assert result.returncode != 0
    assert "DEBUG" in result.stderr


LOGS = """
import django, logging
django.setup()
from django.test import Client
Client().get("/no-such-page/", HTTP_HOST="127.0.0.1")  # 404: the client is told
logging.getLogger("django.request").error("a server error %d", 500)
"""


def test_the_portal_logs_a_server_error_once_and_a_client_s_mistake_not_at_all(tmp_path):
    result = run(["-c", LOGS], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("a server error 500") == 1, result.stderr
    assert "Not Found" not in result.stderr, result.stderr

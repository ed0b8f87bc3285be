"""Django settings for PaddleCloud, read from the environment.

With no variables set, the portal runs on the embedded default: SQLite under ``var/``, the
in-memory channel layer and Celery broker (the worker runs inside ``manage.py runportal``),
the ``local`` execution backend and a PFS root under ``var/pfs``. The variables below switch
to the real parts; nothing else changes. docs/admin/configuration.md has a row for each.
"""

import ipaddress
import re
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from kernel.env import env_bool, env_int, env_list, env_str
from paddlecloud_core.quantity import QuantityError, parse_bytes, parse_cpu, parse_seconds
from paddlecloud_core.spec import DEFAULT_GPU_IMAGE, DEFAULT_IMAGE

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PADDLECLOUD_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", True)


def _secret_key() -> str:
    """SECRET_KEY from the environment; on a debug install, one generated once into var/."""
    key = env_str("SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: with DEBUG off, give a long random SECRET_KEY "
            '(python -c "import secrets; print(secrets.token_urlsafe(50))")'
        )
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# ---------------------------------------------------------------------------------------------
# Applications

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "jobs",
    "scheduling",
    "pfs",
    "registries",
    "notifications",
    "experiments",
    "interactive",
    "dashboard",
    "paddlecloud",  # the wiring itself: its runportal command, which starts the portal
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kernel.security.ContentSecurityPolicyMiddleware",
    # A view failing because PostgreSQL or Redis is down: 503 with Retry-After, not 500.
    "kernel.errors.OutageMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Every request Django answers, by route (after WhiteNoise: static files are not counted).
    "kernel.metrics.RequestMetricsMiddleware",
    # A NUL in the path or a query parameter: a 400 before any view looks anything up.
    "kernel.storable.UnstorableInputMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so its 413 gets every header above; still before any view or the CSRF check
    # reads a body.
    "kernel.security.BodyLimitMiddleware",
]

ROOT_URLCONF = "paddlecloud.urls"
ASGI_APPLICATION = "paddlecloud.asgi.application"
WSGI_APPLICATION = "paddlecloud.wsgi.application"
AUTH_USER_MODEL = "accounts.User"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.context.dashboard",
            ],
        },
    },
]

# ---------------------------------------------------------------------------------------------
# Database: DATABASE_URL (postgres://user:pass@host:5432/name), else SQLite under var/.

_database_url = env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'paddlecloud.sqlite3'}"
try:
    _database = dj_database_url.parse(
        _database_url,
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
        conn_health_checks=True,
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
if _database["ENGINE"] == "django.db.backends.sqlite3":
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    # The embedded worker writes from its own thread: wait for locks, take them up front.
    _database["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
# PostgreSQL: a server that does not answer (a host dropping packets) fails a connection after
# DATABASE_CONNECT_TIMEOUT seconds, an outage the portal answers with 503, rather than hanging
# the request and the health checks (libpq waits for ever). ``connect_timeout`` in
# DATABASE_URL's query wins.
if _database["ENGINE"] == "django.db.backends.postgresql":
    _database.setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT", 5))
# PostgreSQL: a bounded pool of connections per process (DATABASE_POOL_MAX_SIZE; 0, the default,
# opens one per request). Many trainers calling a job's master at once would otherwise take
# more connections than the server allows (bench/master.py).
DATABASE_POOL_MAX_SIZE = env_int("DATABASE_POOL_MAX_SIZE", 0)
if DATABASE_POOL_MAX_SIZE:
    if _database["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_POOL_MAX_SIZE: a pool is for PostgreSQL "
                                   "(DATABASE_URL postgres://…)")
    if _database.get("CONN_MAX_AGE"):
        raise ImproperlyConfigured("DATABASE_POOL_MAX_SIZE and DATABASE_CONN_MAX_AGE: a pool "
                                   "keeps the connections; leave DATABASE_CONN_MAX_AGE unset")
    _database.setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": DATABASE_POOL_MAX_SIZE, "timeout": 30}
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---------------------------------------------------------------------------------------------
# Redis: REDIS_URL is the Celery broker and result store, the channel layer and the cache.
# Without it the embedded default keeps all three in the portal's own process.

REDIS_URL = env_str("REDIS_URL")

if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A receive blocks up to 5 s (BZPOPMIN); redis-py 8's asyncio client gives up
            # reading after 5 s by default, which killed idle WebSockets: allow longer. Its
            # pool refuses (rather than waits) past max_connections, which hundreds of
            # sockets closing at once reached at the default of 100.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30,
                                  "max_connections": 2000}],
                       "prefix": "paddlecloud"},
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "paddlecloud",
        }
    }
else:
    CELERY_BROKER_URL = "memory://localhost/"
    # The in-memory transport polls; its default second between polls would throttle starts.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 0.05}
    CELERY_RESULT_BACKEND = "cache+memory://"
    CHANNEL_LAYERS = {"default": {"BACKEND": "paddlecloud.layers.InProcessChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# A message is acknowledged once its task ran. One that a worker killed -9 had taken comes back
# after the Redis transport's visibility timeout (its default, an hour: a shorter one would hand
# a task still running, or one waiting for its countdown, to a second worker). A job's start
# does not wait for that: who holds it is in the database (jobs/starts.py).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 3600
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# The reconciler (jobs.tasks.jobs_reconcile) is not beat's: every worker keeps its schedule
# (every 15 s while any worker lives, one run at a time: jobs.tasks.reconcile_when_due).
CELERY_BEAT_SCHEDULE = {
    "purge-stale-api-tokens": {"task": "accounts.tasks.token_purge", "schedule": 3600.0},
    "pfs-uploads-purge": {"task": "pfs.tasks.uploads_purge", "schedule": 3600.0},
    "pfs-usage-measure": {"task": "pfs.tasks.usage_measure_all",
                          "schedule": float(env_int("PADDLECLOUD_PFS_USAGE_INTERVAL", 600))},
    # The homes of the users whose jobs run, measured more often: jobs write past quotas.
    "pfs-usage-measure-running": {
        "task": "jobs.tasks.homes_measure",
        "schedule": float(env_int("PADDLECLOUD_PFS_RUNNING_USAGE_INTERVAL", 60))},
}

# ---------------------------------------------------------------------------------------------
# PaddleCloud

# The backend of a datacenter made without one: a name of jobs/backends' registry (checked
# there, when the jobs app is ready).
PADDLECLOUD_BACKEND = env_str("PADDLECLOUD_BACKEND", "local")
PADDLECLOUD_PFS_ROOT = Path(env_str("PADDLECLOUD_PFS_ROOT") or VAR_DIR / "pfs")
# Jobs' parsed metrics, a file each (jobs.metrics_cache): the portal's own, never where a job
# or a user can write; the web processes and the workers should share it (a worker fills it
# in when a job ends).
PADDLECLOUD_METRICS_CACHE_DIR = Path(env_str("PADDLECLOUD_METRICS_CACHE_DIR")
                                     or VAR_DIR / "cache" / "metrics")
# The rootless BuildKit image of runtime image builders on Kubernetes (jobs.builds); a
# datacenter's builder_image overrides it. Pin a version (moby/buildkit:v0.x.y-rootless) to
# keep builds repeatable.
PADDLECLOUD_BUILDER_IMAGE = env_str("PADDLECLOUD_BUILDER_IMAGE", "moby/buildkit:rootless")
# paddlectl build on a local datacenter: buildah on the portal's machine, whose build steps
# (the user's code, contained in a user namespace) run in a network of their own that reaches
# only the datacenter's allowed package indexes (jobs/backends/egress.py): off unless the
# admin says so.
PADDLECLOUD_LOCAL_BUILDS = env_bool("PADDLECLOUD_LOCAL_BUILDS", False)
# permessage-deflate on the WebSockets (uvicorn's ws_per_message_deflate). uvicorn compresses
# each socket's copy of each message on its own (one zlib stream per socket), so a log batch
# followed by N sockets is compressed N times: at 500 followers that was most of the portal's
# time (bench/README.md, logs.py). Off: the sockets carry plain text (a log followed at 1 000
# lines/s is ~90 KB/s).
PADDLECLOUD_WS_DEFLATE = env_bool("PADDLECLOUD_WS_DEFLATE", False)
# Where buildah keeps its images and layers on the portal's machine (a local datacenter's
# builds, and a Kubernetes one's whose kube_builder is portal), a storage per datacenter.
PADDLECLOUD_BUILDAH_DIR = Path(env_str("PADDLECLOUD_BUILDAH_DIR") or VAR_DIR / "buildah")
# The cache of requirements.txt environments (jobs/backends/local/envs.py, kubernetes/envs.py): at
# most this many bytes per datacenter on the local backend, per user home on Kubernetes (a
# quantity: "10Gi", "500Mi"); the least recently used not in use by a live job go first.
PADDLECLOUD_ENV_CACHE_SIZE = env_str("PADDLECLOUD_ENV_CACHE_SIZE", "10Gi")
try:
    PADDLECLOUD_ENV_CACHE_BYTES = parse_bytes(PADDLECLOUD_ENV_CACHE_SIZE)
except QuantityError as _exc:
    raise ImproperlyConfigured(f"PADDLECLOUD_ENV_CACHE_SIZE: {_exc}") from None
# The most a trainer package's requirements.txt may hold (a quantity, "64Ki"): a larger one is
# refused at submit, naming the field, and never read whole (paddlecloud_core/requirements.py).
PADDLECLOUD_REQUIREMENTS_SIZE = env_str("PADDLECLOUD_REQUIREMENTS_SIZE", "64Ki")
try:
    PADDLECLOUD_REQUIREMENTS_BYTES = parse_bytes(PADDLECLOUD_REQUIREMENTS_SIZE)
except QuantityError as _exc:
    raise ImproperlyConfigured(f"PADDLECLOUD_REQUIREMENTS_SIZE: {_exc}") from None
# The local backend's replicas run in bubblewrap sandboxes: "auto" when this machine can make
# them (else it warns, at start, that jobs can read what the portal can), "bwrap" to refuse to
# run jobs without, "off" (see jobs/backends/local/backend.py and docs/admin/security.md).
PADDLECLOUD_LOCAL_SANDBOX = env_str("PADDLECLOUD_LOCAL_SANDBOX", "auto")
if PADDLECLOUD_LOCAL_SANDBOX not in ("auto", "bwrap", "off"):
    raise ImproperlyConfigured(
        f"PADDLECLOUD_LOCAL_SANDBOX={PADDLECLOUD_LOCAL_SANDBOX!r}: expected 'auto', 'bwrap' "
        "or 'off'"
    )
# Kubernetes datacenters: seconds before an API call gives up, and how often one is tried
# (5xx answers and network errors are retried with backoff: 0.2 s, 0.4 s, …).
PADDLECLOUD_KUBE_TIMEOUT = float(env_int("PADDLECLOUD_KUBE_TIMEOUT", 10))
PADDLECLOUD_KUBE_ATTEMPTS = env_int("PADDLECLOUD_KUBE_ATTEMPTS", 4)
# How long one API call may wait out the server's throttling (429 from API Priority and
# Fairness, a 5xx with Retry-After: each wait as long as the server asks) before it fails.
PADDLECLOUD_KUBE_THROTTLE_SECONDS = env_int("PADDLECLOUD_KUBE_THROTTLE_SECONDS", 60)
# How long the cluster may go on refusing to create a job's pod (Pod Security, a LimitRange, a
# webhook: not its ResourceQuota, which is waited for) before the job fails with its reason.
PADDLECLOUD_KUBE_REFUSED_SECONDS = env_int("PADDLECLOUD_KUBE_REFUSED_SECONDS", 60)
# A job master's lease on a task (docs/master.md): a trainer renews it while it reads the task;
# one that stops renewing loses the task to another trainer this long after.
PADDLECLOUD_MASTER_LEASE_SECONDS = env_int("PADDLECLOUD_MASTER_LEASE_SECONDS", 30)
# The threads a portal process answers master calls on (jobs/master/app.py), each keeping a
# database connection open (from the pool, with DATABASE_POOL_MAX_SIZE, which must be larger).
PADDLECLOUD_MASTER_THREADS = env_int("PADDLECLOUD_MASTER_THREADS", 4)
if PADDLECLOUD_MASTER_THREADS < 1:
    raise ImproperlyConfigured("PADDLECLOUD_MASTER_THREADS: at least 1")
if DATABASE_POOL_MAX_SIZE and DATABASE_POOL_MAX_SIZE <= PADDLECLOUD_MASTER_THREADS:
    raise ImproperlyConfigured(
        f"DATABASE_POOL_MAX_SIZE={DATABASE_POOL_MAX_SIZE}: more than PADDLECLOUD_MASTER_THREADS "
        f"({PADDLECLOUD_MASTER_THREADS}), whose connections the pool holds, and room for the "
        "requests besides")


def _base_url(name: str, default: str) -> str:
    """An http(s) URL of the portal, without a trailing slash (paths are added to it)."""
    value = (env_str(name) or default).strip().rstrip("/")
    scheme, _, rest = value.partition("://")
    if scheme not in ("http", "https") or not rest or rest.startswith("/") or any(
            c in value for c in "?# "):
        raise ImproperlyConfigured(f"{name}={value!r}: expected an http or https URL such as "
                                   f"{default}")
    return value


# Where the replicas of jobs with a dataset call their master (docs/master.md).
# PADDLECLOUD_PORTAL_URL: the portal as this machine reaches it, in plain HTTP (runportal's
# --host and --port; `./dev up` serves on 127.0.0.1:8000 unless HOST or PORT say otherwise):
# local replicas call it, sandboxed ones through their job's relay (jobs/backends/local/relay.py).
# PADDLECLOUD_MASTER_BASE_URL: the portal as pods reach it (in a cluster, its Service:
# deploy/config.yaml). Their hosts must be in ALLOWED_HOSTS, and 127.0.0.1 too (the relay's).
PADDLECLOUD_PORTAL_URL = _base_url("PADDLECLOUD_PORTAL_URL", "http://127.0.0.1:8000")
PADDLECLOUD_MASTER_BASE_URL = _base_url("PADDLECLOUD_MASTER_BASE_URL",
                                        "http://paddlecloud.paddlecloud.svc")

# Where the proxy serves each browser route to a port of a running job (a notebook, VisualDL,
# an app of the user's): at an origin of its own, {key}.PADDLECLOUD_SESSIONS_DOMAIN, with the
# portal's scheme and, unless the domain names one, its port (interactive/proxy.py). Browsers
# and curl take *.localhost to be this machine; elsewhere a wildcard DNS name (and, on https,
# a wildcard certificate) that reaches the portal.
PADDLECLOUD_SESSIONS_DOMAIN = env_str("PADDLECLOUD_SESSIONS_DOMAIN", "localhost").strip().lower()
if not re.fullmatch(r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
                    r"(?::\d{1,5})?", PADDLECLOUD_SESSIONS_DOMAIN):
    raise ImproperlyConfigured(
        f"PADDLECLOUD_SESSIONS_DOMAIN={PADDLECLOUD_SESSIONS_DOMAIN!r}: expected a DNS name whose "
        "subdomains reach the portal, such as sessions.example.com (a port may follow: "
        "sessions.example.com:8443)")

# A notebook's image when it names none (interactive.sessions): one with JupyterLab and the
# PaddleCloud client, for Kubernetes datacenters; empty: a job's default (the datacenter's).
PADDLECLOUD_NOTEBOOK_IMAGE = env_str("PADDLECLOUD_NOTEBOOK_IMAGE", "").strip()

PADDLECLOUD_DEFAULT_IMAGE = env_str("PADDLECLOUD_DEFAULT_IMAGE", DEFAULT_IMAGE)
# GPU jobs' (-gpu > 0): the CUDA build of the same Paddle; where the default image above was
# changed and this was not, that image (its CUDA build is not known here).
PADDLECLOUD_DEFAULT_GPU_IMAGE = env_str(
    "PADDLECLOUD_DEFAULT_GPU_IMAGE",
    DEFAULT_GPU_IMAGE if PADDLECLOUD_DEFAULT_IMAGE == DEFAULT_IMAGE else PADDLECLOUD_DEFAULT_IMAGE)
# How long a datacenter's forecast of predicted starts is reused while none of its jobs
# changes state (scheduling.forecasts.job_predictions); 0: computed on every request.
PADDLECLOUD_FORECAST_CACHE_SECONDS = env_int("PADDLECLOUD_FORECAST_CACHE_SECONDS", 15)

# PFS, the file service: the largest upload accepted (beside each user's storage quota), the
# chunk size clients are told to use for resumable uploads, how long an unfinished upload is
# kept. (How often every home's usage is measured again, since jobs write there too, is
# PADDLECLOUD_PFS_USAGE_INTERVAL in the beat schedule above.)
PADDLECLOUD_PFS_MAX_UPLOAD = env_int("PADDLECLOUD_PFS_MAX_UPLOAD", 100 * 2**30)
PADDLECLOUD_PFS_CHUNK_SIZE = env_int("PADDLECLOUD_PFS_CHUNK_SIZE", 64 * 2**20)
# PADDLECLOUD_FRONT: whether runportal puts nginx in front (paddlecloud.front: downloads with
# sendfile): auto (when nginx is installed), on (required), off (uvicorn alone).
PADDLECLOUD_FRONT = env_str("PADDLECLOUD_FRONT", "auto").strip().lower()
# The chunks of a resumable upload behind the front: each is one file nginx takes in and the
# portal renames into place (a client resumes after a broken chunk from its start).
PADDLECLOUD_PFS_FRONT_CHUNK_SIZE = env_int("PADDLECLOUD_PFS_FRONT_CHUNK_SIZE", 2**30)
if PADDLECLOUD_FRONT not in ("auto", "on", "off"):
    raise ImproperlyConfigured(f"PADDLECLOUD_FRONT: {PADDLECLOUD_FRONT!r} is not auto, on or off")
PADDLECLOUD_PFS_UPLOAD_TTL = env_int("PADDLECLOUD_PFS_UPLOAD_TTL", 24 * 3600)
# A tar upload is counted by what it unpacks, against the quota and PADDLECLOUD_PFS_MAX_UPLOAD;
# besides, it may hold at most this many members, and once past the floor unpack to at most
# RATIO times its own size (a compressed tar of zeros is ~1000:1; real data rarely over 20:1).
PADDLECLOUD_PFS_TAR_MAX_MEMBERS = env_int("PADDLECLOUD_PFS_TAR_MAX_MEMBERS", 100_000)
PADDLECLOUD_PFS_TAR_MAX_RATIO = env_int("PADDLECLOUD_PFS_TAR_MAX_RATIO", 200)
PADDLECLOUD_PFS_TAR_RATIO_FLOOR = env_int("PADDLECLOUD_PFS_TAR_RATIO_FLOOR", 64 * 2**20)
# How deep below a home (or the public directory) PFS goes: nothing deeper may be made, and a
# walk (a recursive listing, a download, a package copy, the usage measure) that meets a tree
# deeper than this a job made stops with an error naming it. 256 is far past real datasets
# and checkpoints (a few dozen levels) and keeps a path of short names under the 4096
# characters of a PFS path; a recursive remove goes to any depth.
PADDLECLOUD_PFS_MAX_DEPTH = env_int("PADDLECLOUD_PFS_MAX_DEPTH", 256)
PADDLECLOUD_S3_ACCESS_KEY_ID = env_str("PADDLECLOUD_S3_ACCESS_KEY_ID")
PADDLECLOUD_S3_SECRET_ACCESS_KEY = env_str("PADDLECLOUD_S3_SECRET_ACCESS_KEY")

# Registry passwords are encrypted with these Fernet keys (registries/crypto.py: the first
# encrypts, all decrypt; rotate with manage.py rotate_credential_keys).
PADDLECLOUD_CREDENTIAL_KEYS = env_list("PADDLECLOUD_CREDENTIAL_KEYS", [])

# Notifications (notifications/): e-mail goes through Django's mail backend (EMAIL_BACKEND, the
# SMTP one unless set; EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD,
# EMAIL_USE_TLS or EMAIL_USE_SSL, from DEFAULT_FROM_EMAIL).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "paddlecloud@localhost")
# The portal's address as users' browsers reach it: notifications link to a job's page.
PADDLECLOUD_PUBLIC_URL = (env_str("PADDLECLOUD_PUBLIC_URL", "") or "").rstrip("/")
# A failed delivery is tried again after this many seconds, doubling (an hour at most), for
# PADDLECLOUD_NOTIFY_RETRY_HOURS; an endpoint failing for PADDLECLOUD_NOTIFY_DISABLE_DAYS is
# disabled and its owner told by e-mail.
PADDLECLOUD_NOTIFY_RETRY_SECONDS = env_int("PADDLECLOUD_NOTIFY_RETRY_SECONDS", 10)
PADDLECLOUD_NOTIFY_RETRY_HOURS = env_int("PADDLECLOUD_NOTIFY_RETRY_HOURS", 24)
PADDLECLOUD_NOTIFY_DISABLE_DAYS = env_int("PADDLECLOUD_NOTIFY_DISABLE_DAYS", 3)
# Webhooks go to public addresses only, unless their address is in one of these networks
# (CIDRs, comma-separated: a chat server inside, e.g. 10.1.2.0/24); plain http:// only with
# PADDLECLOUD_WEBHOOK_ALLOW_HTTP.
PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS = env_list("PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS", [])
for _network in PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS: {_network!r} is not "
                                   "a network like 10.1.2.0/24 or 192.0.2.7") from None
PADDLECLOUD_WEBHOOK_ALLOW_HTTP = env_bool("PADDLECLOUD_WEBHOOK_ALLOW_HTTP", False)

# GET /metrics (kernel/metrics.py, docs/admin/metrics.md): Prometheus sends this bearer token.
# Unset: the endpoint answers 404 to everybody.
PADDLECLOUD_METRICS_TOKEN = (env_str("PADDLECLOUD_METRICS_TOKEN") or "").strip()
if 0 < len(PADDLECLOUD_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured(
        "PADDLECLOUD_METRICS_TOKEN: at least 16 characters "
        '(python3 -c "import secrets; print(secrets.token_urlsafe(32))")')

# API tokens: lifetime, and how many failed logins are allowed before the token endpoint
# answers 429 — per (username, address) pair and per address across all usernames.
PADDLECLOUD_TOKEN_TTL_DAYS = env_int("PADDLECLOUD_TOKEN_TTL_DAYS", 30)
PADDLECLOUD_LOGIN_FAILURE_LIMIT = env_int("PADDLECLOUD_LOGIN_FAILURE_LIMIT", 5)
PADDLECLOUD_LOGIN_FAILURE_LIMIT_PER_ADDRESS = env_int(
    "PADDLECLOUD_LOGIN_FAILURE_LIMIT_PER_ADDRESS", 30
)
PADDLECLOUD_LOGIN_FAILURE_WINDOW = env_int("PADDLECLOUD_LOGIN_FAILURE_WINDOW", 15 * 60)

# Per-user limits (accounts/throttling.py): the dashboard's WebSockets a user may have open at
# once (each live page holds one to four; one more is closed with code 4429), and the dry runs
# of job submissions a user may ask for per minute (the API's, `paddlectl submit`'s check of a
# job before its package is uploaded, the Submit page's; each builds the job's objects and
# forecasts its start: one more is answered 429 with Retry-After).
PADDLECLOUD_WEBSOCKETS_PER_USER = env_int("PADDLECLOUD_WEBSOCKETS_PER_USER", 50)
PADDLECLOUD_DRY_RUNS_PER_MINUTE = env_int("PADDLECLOUD_DRY_RUNS_PER_MINUTE", 60)
for _name in ("PADDLECLOUD_WEBSOCKETS_PER_USER", "PADDLECLOUD_DRY_RUNS_PER_MINUTE"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name}={globals()[_name]}: at least 1")

# ---------------------------------------------------------------------------------------------
# REST API

# The reverse proxies in front: how many (each adds the address it had the request from to
# X-Forwarded-For), and the addresses or networks the nearest one connects from. Forwarded
# headers are taken from those addresses only (kernel.security.ForwardedHeaders), never
# from a job's relay (paddlecloud_core.contract.RELAY_SOURCE_ADDRESS); from anyone else they
# are dropped, so the client's address is the connection's.
TRUSTED_PROXIES = env_int("TRUSTED_PROXIES", 0)
TRUSTED_PROXY_ADDRESSES = env_list("TRUSTED_PROXY_ADDRESSES", ["127.0.0.1", "::1"])
for _address in TRUSTED_PROXY_ADDRESSES:
    try:
        ipaddress.ip_network(_address, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"TRUSTED_PROXY_ADDRESSES: {_address!r} is not an IP address or network "
            "(e.g. 127.0.0.1 or 10.0.0.0/24)") from None

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["kernel.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kernel.errors.exception_handler",
    "NUM_PROXIES": 0,  # REMOTE_ADDR is the client's (kernel.security.ForwardedHeaders)
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "PaddleCloud API",
    "DESCRIPTION": (
        "Run distributed PaddlePaddle training jobs. Authenticate with "
        "`Authorization: Bearer <token>` (POST /api/v1/auth/token/). Every 4xx answer is "
        '`{"code", "message", "fields"}`.'
    ),
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # A job's states, shown by Job and GroupJob alike: one enum, named.
    "ENUM_NAME_OVERRIDES": {"JobStateEnum": "jobs.states.JobState",
                            "SubscriptionChannelEnum": "notifications.models.Subscription.Channel",
                            "SubscriptionFormatEnum": "notifications.models.Subscription.Format"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "pfs.schema.transfer_paths",
    ],
}

# ---------------------------------------------------------------------------------------------
# Authentication and sessions (browser)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
CSRF_FAILURE_VIEW = "kernel.errors.csrf_failure"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
# Passwords (Django's check, behind the failed-login counters: accounts/backends.py),
# then single sign-on (which answers only its own callback: accounts/sso.py).
AUTHENTICATION_BACKENDS = [
    "accounts.backends.PasswordBackend",
    "accounts.sso.SsoBackend",
]

# Single sign-on with OpenID Connect (mozilla-django-oidc; docs/admin/sso.md): off unless
# PADDLECLOUD_OIDC_ISSUER and PADDLECLOUD_OIDC_CLIENT_ID are set. The provider's endpoints and
# keys come from ISSUER/.well-known/openid-configuration, read at the first login (and again
# an hour later); ID tokens must be RS256, signed by a key of the provider's JWKS, issued by
# ISSUER for CLIENT_ID. The portal's callback, to register at the provider, is
# <portal>/oidc/callback/.
PADDLECLOUD_OIDC_ISSUER = (env_str("PADDLECLOUD_OIDC_ISSUER") or "").strip().rstrip("/")
PADDLECLOUD_OIDC_CLIENT_ID = (env_str("PADDLECLOUD_OIDC_CLIENT_ID") or "").strip()
PADDLECLOUD_OIDC_CLIENT_SECRET = env_str("PADDLECLOUD_OIDC_CLIENT_SECRET") or ""
if bool(PADDLECLOUD_OIDC_ISSUER) != bool(PADDLECLOUD_OIDC_CLIENT_ID):
    raise ImproperlyConfigured("PADDLECLOUD_OIDC_ISSUER and PADDLECLOUD_OIDC_CLIENT_ID: single "
                               "sign-on needs both (or neither)")
if PADDLECLOUD_OIDC_ISSUER and not PADDLECLOUD_OIDC_ISSUER.startswith(("https://", "http://")):
    raise ImproperlyConfigured(f"PADDLECLOUD_OIDC_ISSUER={PADDLECLOUD_OIDC_ISSUER!r}: the "
                               "provider's issuer URL, e.g. https://login.example.com/realms/x")
# What the login page's button says: "Log in with <name>".
PADDLECLOUD_OIDC_PROVIDER_NAME = env_str("PADDLECLOUD_OIDC_PROVIDER_NAME", "single sign-on")
PADDLECLOUD_OIDC_SCOPES = env_str("PADDLECLOUD_OIDC_SCOPES", "openid email profile groups")
# The claim (in the ID token or the userinfo answer) listing the user's groups, mapped to
# datacenters by the admin (SsoGroupMapping, in the Django admin).
PADDLECLOUD_OIDC_GROUPS_CLAIM = env_str("PADDLECLOUD_OIDC_GROUPS_CLAIM", "groups")
# On: a first login whose verified e-mail (email_verified true) is an existing user's takes
# that user. Off (the default): single sign-on only ever finds users it made or linked.
PADDLECLOUD_OIDC_MATCH_EMAIL = env_bool("PADDLECLOUD_OIDC_MATCH_EMAIL", False)
# On: the login page offers single sign-on only (no password form).
PADDLECLOUD_OIDC_ONLY = env_bool("PADDLECLOUD_OIDC_ONLY", False)
PADDLECLOUD_OIDC_TIMEOUT = float(env_int("PADDLECLOUD_OIDC_TIMEOUT", 10))
# mozilla-django-oidc's own settings (the client, scopes, timeout and endpoints it reads from
# the above: accounts/sso.py, oidc_setting).
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_PKCE = True

# ---------------------------------------------------------------------------------------------
# Security. With DEBUG off these default to what `manage.py check --deploy` asks for; each can
# be turned off by its own variable (e.g. SECURE_SSL_REDIRECT=0 for a plain-HTTP trial).

# (HTTPS behind a proxy: X-Forwarded-Proto from a trusted proxy is the request's scheme,
# kernel.security.ForwardedHeaders; no SECURE_PROXY_SSL_HEADER, which believes anyone.)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# Plain HTTP from inside: the kubelet's probes (/healthz, /readyz), and trainers calling their
# job's master through the portal's Service (PADDLECLOUD_MASTER_BASE_URL), which never passes
# the TLS proxy.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^api/v1/master/"]
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# The pages' Content-Security-Policy (kernel/security.py sets it on every HTML answer):
# scripts, styles, images and sockets from the portal itself only; nothing inline (no
# <script> or <style> in a page, no style="" or onclick="" attributes); no plugins, no
# framing; forms post here only.
PADDLECLOUD_CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
# Pages that cannot do with it, by path prefix, and the directives they get instead; still no
# inline script anywhere. Swagger UI draws its icons from data: URLs; ReDoc styles itself with
# <style> elements it makes as it runs and searches in a worker it makes from a blob: (its
# logo from its makers' site is refused, and hides itself); Django's admin has an inline
# <style> in change lists without actions. (Inline styles run no code.)
PADDLECLOUD_CSP_EXCEPTIONS = {
    "/api/docs/": {"img-src": "'self' data:"},
    "/api/redoc/": {"style-src": "'self' 'unsafe-inline'", "img-src": "'self' data:",
                    "worker-src": "blob:"},
    "/admin/": {"style-src": "'self' 'unsafe-inline'"},
}
# What a user's file is downloaded with (pfs/transfer.py), should a browser show it at all:
# in a sandbox of its own origin, allowed to load nothing.
PADDLECLOUD_CSP_USER_FILES = "sandbox; default-src 'none'"

# ---------------------------------------------------------------------------------------------
# Static files (served by WhiteNoise; `manage.py collectstatic` fills STATIC_ROOT)

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT") or VAR_DIR / "static")
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# ---------------------------------------------------------------------------------------------
# Logging: to stderr, one line per record. Secrets (passwords, tokens) are never logged.

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "line": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django's own console handler (DEBUG only) on top of the root's printed every line of
        # django.* twice; its records reach the root's handler, once.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        # A 4xx is the client's to hear (in the error body) and is in the access log already;
        # what went wrong in the server (5xx) is logged here.
        "django.request": {"level": "ERROR"},
        "django.db.backends": {"level": "INFO"},
        # Celery says INFO for every task it runs (a job is looked at every second).
        "celery": {"level": env_str("CELERY_LOG_LEVEL", "WARNING")},
    },
}

# VisualDL for one job or several (interactive.visualdl): each is a session job of its user's
# asking for this much, stopped once nobody has looked at it for PADDLECLOUD_VISUALDL_IDLE
# (a length of time: 90s, 15m, 1h).
PADDLECLOUD_VISUALDL_IDLE = env_str("PADDLECLOUD_VISUALDL_IDLE", "15m")
PADDLECLOUD_VISUALDL_CPU = env_str("PADDLECLOUD_VISUALDL_CPU", "1")
PADDLECLOUD_VISUALDL_MEMORY = env_str("PADDLECLOUD_VISUALDL_MEMORY", "1Gi")
for _name, _parse in (("IDLE", parse_seconds), ("CPU", parse_cpu), ("MEMORY", parse_bytes)):
    try:
        if _parse(globals()[f"PADDLECLOUD_VISUALDL_{_name}"]) <= 0:
            raise QuantityError("must be more than 0")
    except QuantityError as _exc:
        raise ImproperlyConfigured(f"PADDLECLOUD_VISUALDL_{_name}: {_exc}") from None

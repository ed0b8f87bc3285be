"""The environment every replica gets, on every backend (DESIGN.md, "Environment contract").

``replica_env`` is the one place it is built: the local backend passes it to processes, the
Kubernetes backend writes it into pod specs. A job's extra ``env`` may not set these names.
Those of ``SECRET_ENV`` are secrets: never logged nor shown (in dry runs, events, the API);
pods read them from a Secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

from . import layout

LEGACY_VARIABLES = (
    "PADDLE_INIT_TRAINER_ID", "PADDLE_INIT_NUM_GRADIENT_SERVERS", "PADDLE_INIT_PSERVERS",
    "PADDLE_INIT_PORT", "PADDLE_INIT_PORTS_NUM", "PADDLE_INIT_PORTS_NUM_FOR_SPARSE",
    "PADDLE_INIT_NUM_PASSES", "PADDLE_INIT_USE_GPU", "PADDLE_CLOUD_CURRENT_DATACENTER",
    "TRAINER_ID", "TRAINERS", "JOB_NAME", "JOB_NAMESPACE",
)
FLEET_VARIABLES = (
    "TRAINING_ROLE", "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID",
    "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT", "POD_IP", "PADDLE_PORT",
    "PADDLE_MASTER", "PADDLE_NNODES",
)
# Ours: which pserver this is, where the job's files are as the replica sees them, and how many
# checkpoints it keeps (paddlecloud_sdk.checkpoint).
CHECKPOINT_DIR_VARIABLE = "PADDLE_CHECKPOINT_DIR"
KEEP_CHECKPOINTS_VARIABLE = "PADDLE_KEEP_CHECKPOINTS"
# Which run of a name this is (the job's uid): its checkpoints are its own, never those of an
# earlier job of the name left in the same directory.
JOB_UID_VARIABLE = "PADDLE_JOB_UID"
# A job submitted with ``resume_from``: the checkpoint of another of the owner's jobs it starts
# from (its step directory), which the SDK's ``latest()``/``load()`` take while the job has
# none of its own, and never write.
RESUME_FROM_VARIABLE = "PADDLE_RESUME_FROM"
PADDLECLOUD_VARIABLES = ("PADDLE_PSERVER_ID", "PADDLE_OUTPUT_DIR", "PADDLE_PFS_HOME",
                         "PADDLE_PFS_PUBLIC", CHECKPOINT_DIR_VARIABLE,
                         KEEP_CHECKPOINTS_VARIABLE, JOB_UID_VARIABLE, RESUME_FROM_VARIABLE)
# The newest checkpoints a job keeps unless it says (``keep_checkpoints``): older ones are
# removed once a newer one is complete.
KEEP_CHECKPOINTS = 3
# A job with a dataset: where its master answers, and the token its task calls carry
# (docs/master.md).
MASTER_URL_VARIABLE = "PADDLECLOUD_MASTER_URL"
MASTER_TOKEN_VARIABLE = "PADDLECLOUD_MASTER_TOKEN"  # noqa: S105 - its name
MASTER_VARIABLES = (MASTER_URL_VARIABLE, MASTER_TOKEN_VARIABLE)
# A session (a notebook, VisualDL: ``interactive.sessions``, ``paddlecloud_sdk.sessions``): the
# token its server asks of every request (the portal's proxy sends it), the port it serves on,
# and how code in it reaches the portal as its owner (the portal as the replica reaches it, the
# owner's name and a token of the owner's for this session alone, revoked when it ends).
# ``PADDLE_NOTEBOOK=YES`` (the seeds'): a notebook's ``dist_train`` and ``PaddleJob`` submit.
SESSION_TOKEN_VARIABLE = "PADDLECLOUD_SESSION_TOKEN"  # noqa: S105 - its name
SESSION_PORT_VARIABLE = "PADDLECLOUD_SESSION_PORT"
PORTAL_URL_VARIABLE = "PADDLECLOUD_PORTAL"
USER_VARIABLE = "PADDLECLOUD_USER"
API_TOKEN_VARIABLE = "PADDLECLOUD_API_TOKEN"  # noqa: S105 - its name
NOTEBOOK_VARIABLE = "PADDLE_NOTEBOOK"
SESSION_VARIABLES = (SESSION_TOKEN_VARIABLE, SESSION_PORT_VARIABLE, PORTAL_URL_VARIABLE,
                     USER_VARIABLE, API_TOKEN_VARIABLE, NOTEBOOK_VARIABLE)
# A session's server listens on its replica's own loopback at the replica's port (its
# endpoint's: unique on the machine for a local job, sandboxed or not), which the portal reads
# from the replica's endpoint; this where none is given (by hand).
SESSION_PORT = 8888
RESERVED_ENV = frozenset(LEGACY_VARIABLES + FLEET_VARIABLES + PADDLECLOUD_VARIABLES
                         + MASTER_VARIABLES + SESSION_VARIABLES)
# The variables whose values are secrets: never written to a log, an event, a dry run or
# anything the API shows; Kubernetes pods take them from a Secret (not their pod spec).
SECRET_ENV = frozenset({MASTER_TOKEN_VARIABLE, SESSION_TOKEN_VARIABLE, API_TOKEN_VARIABLE})
# A job's own variables whose names look like they hold a secret (API_KEY, DB_PASSWORD,
# HF_TOKEN, AWS_SECRET_ACCESS_KEY, …): where several jobs are put side by side (compare), such a
# variable is shown as set, never its value.
SECRET_NAME_RE = re.compile(r"SECRET|PASSW(OR)?D|PASSPHRASE|TOKEN|CREDENTIAL|PRIVATE|AUTH|"
                            r"COOKIE|SESSION|(^|_)DSN($|_)|(^|_)(API_?)?KEY(S)?($|_)",
                            re.IGNORECASE)


def env_secret(name: str) -> bool:
    """Whether the value of variable ``name`` is never shown (``SECRET_ENV``, or its name
    looks like a secret's)."""
    return name in SECRET_ENV or bool(SECRET_NAME_RE.search(name))
# A replica being stopped (a kill, a failed job, the pservers of a finished one) gets SIGTERM, then
# SIGKILL this many seconds later to save its work: on every backend (a pod's
# terminationGracePeriodSeconds) and in paddlectl's local runs.
STOP_GRACE_SECONDS = 10
# The variables that name replicas by host (``host:port`` lists, or hosts): where replicas have
# DNS names (Kubernetes), the pods write them with addresses before the entry starts, since
# PaddlePaddle compares them with POD_IP.
ENDPOINT_VARIABLES = ("PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_INIT_PSERVERS",
                      "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT", "PADDLE_MASTER")

# What a job's name and its extra variables may be, wherever they are checked (the portal, and
# paddlectl and the SDK before anything is sent). Object names are derived from the job's
# (``<name>-trainer``, ``<name>-pserver-N`` and their pods), and Kubernetes caps them at 63.
JOB_NAME_MAX = 40
JOB_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TaskMaster:
    """Where a job's replicas reach its master (the portal's, docs/master.md): the URL as they
    see it (it depends on the backend) and the job's token (the portal's to make)."""

    url: str
    token: str = field(repr=False)


@dataclass(frozen=True)
class SessionAccess:
    """What a session's replica gets (``SESSION_VARIABLES``): the portal as it reaches it (it
    depends on the backend), its owner, its server's token and its owner's API token for it
    (both the portal's to make: ``session_token``, ``session_api_token``)."""

    portal: str
    username: str
    token: str = field(repr=False)
    api_token: str = field(repr=False)


@dataclass(frozen=True)
class Topology:
    """Where every replica of a job listens (``host:port``, in index order), and where they
    reach the job's master: a job with a dataset has one, on every backend; none elsewhere
    (``paddlectl local train``)."""

    pservers: tuple[str, ...]
    trainers: tuple[str, ...]
    master: str | None  # collective jobs: trainer 0's rendezvous endpoint
    task_master: TaskMaster | None = None
    session: SessionAccess | None = None  # a session's (``job.session``): none elsewhere


@dataclass(frozen=True)
class Paths:
    """The job's directories as its replicas see them."""

    output: str
    pfs_home: str
    pfs_public: str
    checkpoints: str


def pfs_paths(datacenter: str, username: str, name: str) -> Paths:
    """The job's directories at their PFS paths (``/pfs/{dc}/home/{user}/jobs/{name}/…``):
    where its replicas see them on Kubernetes and in a local sandbox, so that what they print
    is what users write."""
    home = layout.pfs_home(datacenter, username)
    return Paths(output=layout.output_path(home, name), pfs_home=home,
                 pfs_public=layout.pfs_public(datacenter),
                 checkpoints=layout.checkpoints_path(home, name))


PADDLE_QUIET_WARNINGS = "ignore:No ccache found:UserWarning"

# What every replica gets unless its job's own ``env`` says otherwise: logs that show the job,
# not PaddlePaddle's housekeeping.
REPLICA_DEFAULT_ENV = {
    "PYTHONUNBUFFERED": "1",
    # PaddlePaddle warns on import that ccache is missing, which matters only to whoever
    # compiles C++ extensions.
    "PYTHONWARNINGS": PADDLE_QUIET_WARNINGS,
    # Its C++ side logs INFO lines through glog ("I1126 16:50:11.26 4 tcp_store.cc:336] create
    # libuv server at port …"); warnings and errors still show. ``-env GLOG_minloglevel=0``
    # brings them back when debugging a rendezvous.
    "GLOG_minloglevel": "1",
}


def trainers_restart_together(job) -> bool:
    """A collective job (trainers only, more than one) cannot take back one restarted rank:
    its communicator is made once, by all of them. So when one trainer fails, all restart
    (as JobSet's maxRestarts or Volcano's RestartJob do); a pserver job's trainers restart
    one by one."""
    return job.pservers == 0 and job.trainers > 1


def trainers_elastic(job) -> bool:
    """Whether the job's trainers may come and go (``trainers`` given as MIN:MAX): it runs
    with at least ``trainers_min`` of them and at most ``trainers``."""
    return job.trainers_min is not None and job.trainers_min < job.trainers


def trainers_least(job) -> int:
    """The fewest trainers the job runs with: ``trainers_min``, or all for a fixed job."""
    return job.trainers_min if trainers_elastic(job) else job.trainers


def job_namespace(datacenter, username: str) -> str:
    """The user's namespace in a datacenter: a DNS-1123 label from the prefix and username,
    cut short with a hash suffix when too long or when the username had to be changed."""
    safe = re.sub(r"[^a-z0-9-]+", "-", username.lower()).strip("-") or "user"
    name = f"{datacenter.namespace_prefix}{safe}"
    if len(name) > 63 or safe != username:
        digest = hashlib.sha256(username.encode()).hexdigest()[:8]
        name = f"{name[: 63 - 9].rstrip('-')}-{digest}"
    return name


# The address a job's relay (jobs/backends/local/relay.py) connects to the portal from, on the
# machine's loopback: what a sandboxed replica sends the portal arrives from it, and the
# portal never takes a forwarded header (X-Forwarded-For, X-Forwarded-Proto) from it, whatever
# TRUSTED_PROXY_ADDRESSES says (kernel.security.ForwardedHeaders).
RELAY_SOURCE_ADDRESS = "127.0.0.2"


def master_url(portal: str, job_uid) -> str:
    """Where a job's master answers, below ``portal`` (the portal's URL as the replicas reach
    it, which depends on the backend)."""
    return f"{portal.rstrip('/')}/api/v1/master/{job_uid}"


def master_token(secret: str, job_uid) -> str:
    """The token of a job's master calls: an HMAC of the job's uid with the portal's secret
    (``SECRET_KEY``), so it is never stored and is good for that job only. The backends give
    it to the replicas; ``jobs.master.dispatch.master_token``, which the portal checks calls
    against, must make the same (tests/jobs/test_master_access.py holds it)."""
    digest = hmac.new(secret.encode(), f"paddlecloud-master:{job_uid}".encode(),
                      "sha256").hexdigest()
    return f"pcm_{digest}"


def _session_secret(secret: str, purpose: str, job_uid) -> str:
    return hmac.new(secret.encode(), f"paddlecloud-{purpose}:{job_uid}".encode(),
                    "sha256").hexdigest()


def session_token(secret: str, job_uid) -> str:
    """The token a session's server asks of every request (its ``SESSION_TOKEN_VARIABLE``):
    an HMAC of the job's uid with the portal's secret, as ``master_token``, so it is never
    stored and is good for that session only. Only the portal's proxy sends it."""
    return "pcs_" + _session_secret(secret, "session", job_uid)


def session_api_token(secret: str, job_uid) -> str:
    """The API token a session's code submits with, as its owner (``API_TOKEN_VARIABLE``; the
    ``pct_`` of every API token): made the same way, the portal stores only its digest (an
    ``accounts.ApiToken`` of the owner's, revoked when the session ends)."""
    return "pct_" + _session_secret(secret, "session-api", job_uid)


def session_access(secret: str, job, portal: str) -> SessionAccess | None:
    """What a session's replica gets, ``portal`` being the portal as it reaches it; None for a
    job that is no session."""
    if not getattr(job, "session", ""):
        return None
    return SessionAccess(portal=portal.rstrip("/"), username=job.owner.username,
                         token=session_token(secret, job.uid),
                         api_token=session_api_token(secret, job.uid))


def _host(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[0]


def _port(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[1]


def replica_env(job, role: str, index: int, topology: Topology, paths: Paths,
                namespace: str) -> dict[str, str]:
    """The environment of one replica (``role`` ``trainer`` or ``pserver``), extra env first
    so that the contract always wins.

    An elastic job's counts (``TRAINERS``, ``PADDLE_TRAINERS_NUM`` …) are the most trainers
    that run at once (``trainers``, its MAX), and ``PADDLE_TRAINER_ENDPOINTS`` lists those
    first ones: a trainer that replaces a lost one has an index of its own beyond them
    (``topology.trainers`` holds every trainer's endpoint), which the others never need."""
    own = (topology.trainers if role == "trainer" else topology.pservers)[index]
    env = dict(job.env)
    env.update({
        "JOB_NAME": job.name,
        "JOB_NAMESPACE": namespace,
        "PADDLE_CLOUD_CURRENT_DATACENTER": job.datacenter.name,
        "TRAINERS": str(job.trainers),
        "PADDLE_TRAINERS_NUM": str(job.trainers),
        "PADDLE_INIT_NUM_GRADIENT_SERVERS": str(job.trainers),
        "PADDLE_NNODES": str(job.trainers),
        "PADDLE_INIT_NUM_PASSES": str(job.passes),
        "PADDLE_INIT_USE_GPU": "1" if job.gpu else "0",
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(topology.pservers),
        "PADDLE_INIT_PSERVERS": ",".join(_host(e) for e in topology.pservers),
        "PADDLE_INIT_PORT": _port(topology.pservers[0]) if topology.pservers else _port(own),
        "PADDLE_INIT_PORTS_NUM": "1",
        "PADDLE_INIT_PORTS_NUM_FOR_SPARSE": "0",
        "PADDLE_TRAINER_ENDPOINTS": ",".join(topology.trainers[:job.trainers]),
        "PADDLE_CURRENT_ENDPOINT": own,
        "POD_IP": _host(own),
        "PADDLE_PORT": _port(own),
        "PADDLE_OUTPUT_DIR": paths.output,
        "PADDLE_PFS_HOME": paths.pfs_home,
        "PADDLE_PFS_PUBLIC": paths.pfs_public,
        CHECKPOINT_DIR_VARIABLE: paths.checkpoints,
        KEEP_CHECKPOINTS_VARIABLE: str(job.keep_checkpoints),
    })
    if job.uid:  # a job of the portal (``paddlectl local train`` has none)
        env[JOB_UID_VARIABLE] = str(job.uid)
    if job.resume_from:  # "JOB:STEP", as the portal checked it
        other, _, step = job.resume_from.rpartition(":")
        env[RESUME_FROM_VARIABLE] = layout.checkpoint_path(paths.pfs_home, other, int(step))
    for name, value in REPLICA_DEFAULT_ENV.items():
        env.setdefault(name, value)
    if role == "trainer":
        env.update({
            "TRAINING_ROLE": "TRAINER",
            "TRAINER_ID": str(index),
            "PADDLE_TRAINER_ID": str(index),
            "PADDLE_INIT_TRAINER_ID": str(index),
        })
        if topology.master:
            env["PADDLE_MASTER"] = topology.master
    else:
        env.update({"TRAINING_ROLE": "PSERVER", "PADDLE_PSERVER_ID": str(index)})
    if topology.task_master:
        env.update({MASTER_URL_VARIABLE: topology.task_master.url,
                    MASTER_TOKEN_VARIABLE: topology.task_master.token})
    if (session := topology.session) is not None:
        env.update({SESSION_TOKEN_VARIABLE: session.token,
                    SESSION_PORT_VARIABLE: _port(own),
                    PORTAL_URL_VARIABLE: session.portal, USER_VARIABLE: session.username,
                    API_TOKEN_VARIABLE: session.api_token})
        if job.session == "notebook":
            env[NOTEBOOK_VARIABLE] = "YES"
    return env

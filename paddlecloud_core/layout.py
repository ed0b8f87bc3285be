"""Where things are: PFS paths as users write them, and a job's files in its owner's home.

    /pfs/{datacenter}/home/{user}/...   read-write, the owner only
    /pfs/{datacenter}/public/...        read-only, every member of the datacenter

    {home}/jobs/{name}/output/                     the job's output (PADDLE_OUTPUT_DIR)
    {home}/jobs/{name}/output-{uid or time}/       an earlier output of that name, kept aside
    {home}/jobs/{name}/output/node_{i}/train.log   trainer i's log (the seeds' layout)
    {home}/jobs/{name}/output/node_{i}/server.log  pserver i's log
    {home}/jobs/{name}/output/node_{i}/metrics.jsonl, server-metrics.jsonl
    {home}/jobs/{name}/checkpoints/                the job's checkpoints (PADDLE_CHECKPOINT_DIR)
    {home}/jobs/{name}/checkpoints/step-{step:012d}/   one complete checkpoint: its files and
                                                   manifest.json (paddlecloud_sdk.checkpoint)
    {home}/jobs/{name}/checkpoints/.step-{step:012d}.tmp-{random}/   one being written
    {home}/jobs/{name}/checkpoints-{uid or time}/  an earlier job's of that name, kept aside:
                                                   a new job of the name starts from none
    {home}/jobs/{name}/{dirname}/                  a local package uploaded by paddlectl/SDK:
                                                   the job's package snapshot
    {home}/jobs/{name}/package/                    the snapshot of a package elsewhere in PFS,
                                                   copied at submission (what the job runs)
    {home}/jobs/{name}/.site-packages-{key}/       its requirements, installed by its pods
                                                   (when the portal could not read them)
    {home}/.paddlecloud/envs/{digest}/site-packages  an environment of the owner's jobs on
                                                   Kubernetes, shared by those of that digest

The portal (which maps these onto disk and checks who may touch them), ``paddlectl``, the SDK
and the replicas all place and find files with these functions; nobody spells them again.
"""

from __future__ import annotations

from dataclasses import dataclass

PFS_PREFIX = "/pfs/"
MAX_PATH = 4096
MAX_COMPONENT = 255
# Names the file service uses for uploads in progress: hidden, and not for users to make.
UPLOAD_PREFIX = ".pfs-upload-"

JOBS_DIR = "jobs"
# A replica's working directory, where its package is: a pod's, and a local sandbox's.
WORKSPACE = "/workspace"
OUTPUT_DIR = "output"
# In the output and checkpoint directories: the uid of the job they are for.
OUTPUT_MARKER = ".paddlecloud-job"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PREFIX = "step-"
CHECKPOINT_MANIFEST = "manifest.json"  # in a checkpoint's directory, written last
# In the output directory (Kubernetes): which of a collective job's trainers have succeeded.
PEERS_ENDED_DIR = ".paddlecloud-ended"
SITE_PACKAGES_PREFIX = ".site-packages-"
METRICS_FILE = "metrics.jsonl"
PSERVER_METRICS_FILE = "server-metrics.jsonl"  # trainer 0 and pserver 0 share node_0
# Keys of a metrics record that are not metrics.
METRICS_RESERVED = ("step", "time")

Rel = tuple[str, ...]


# --- PFS paths ---------------------------------------------------------------------------------

def pfs_home(datacenter: str, username: str) -> str:
    """A user's home in a datacenter: ``/pfs/{dc}/home/{user}``."""
    return f"/pfs/{datacenter}/home/{username}"


def pfs_public(datacenter: str) -> str:
    """A datacenter's read-only public area: ``/pfs/{dc}/public``."""
    return f"/pfs/{datacenter}/public"


class PfsPathError(ValueError):
    """A text that is not a PFS path; the message says why, for the user."""


@dataclass(frozen=True)
class PfsPath:
    datacenter: str
    area: str  # "home" or "public"
    user: str | None  # the home's owner; None for public
    parts: Rel  # below the home or public directory

    def __str__(self) -> str:
        return "/".join([self.area_label, *self.parts])

    @property
    def area_label(self) -> str:
        """The PFS path of the area: ``/pfs/{dc}/home/{user}`` or ``/pfs/{dc}/public``."""
        if self.user is None:
            return pfs_public(self.datacenter)
        return pfs_home(self.datacenter, self.user)

    @property
    def public(self) -> bool:
        return self.area == "public"


def pfs_path_split(text: str) -> PfsPath:
    """Parse ``/pfs/{dc}/home/{user}/…`` or ``/pfs/{dc}/public/…`` before any I/O: no empty,
    ``.`` or ``..`` components, no upload names. Raises ``PfsPathError``."""
    if not isinstance(text, str) or not text:
        raise PfsPathError("a PFS path is required, e.g. /pfs/datacenter1/home/alice/pkg")
    if len(text) > MAX_PATH:
        raise PfsPathError(f"longer than {MAX_PATH} characters")
    if "\0" in text:
        raise PfsPathError("contains a NUL character")
    not_pfs = (f"{text!r} is not a PFS path: it must start with "
               "/pfs/{datacenter}/home/{user}/ or /pfs/{datacenter}/public/")
    if not text.startswith(PFS_PREFIX):
        raise PfsPathError(not_pfs)
    parts = text[len(PFS_PREFIX):].rstrip("/").split("/")
    for part in parts:
        if part in ("", "."):
            raise PfsPathError(f"{text!r} has an empty or '.' component")
        if part == "..":
            raise PfsPathError(f"{text!r}: '..' is not allowed in PFS paths")
        if part.startswith(UPLOAD_PREFIX):
            raise PfsPathError(f"{text!r}: names starting with {UPLOAD_PREFIX} are reserved "
                               "for uploads in progress")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT:
            raise PfsPathError(f"a component of {text!r} is longer than the file system's "
                               f"limit of {MAX_COMPONENT} bytes")
    if len(parts) < 2 or parts[1] not in ("home", "public"):
        raise PfsPathError(not_pfs)
    datacenter, area = parts[0], parts[1]
    if area == "home":
        if len(parts) < 3:
            raise PfsPathError(f"{text!r} names no user: use /pfs/{datacenter}/home/{{user}}/…")
        return PfsPath(datacenter, "home", parts[2], tuple(parts[3:]))
    return PfsPath(datacenter, "public", None, tuple(parts[2:]))


# --- a job's files, relative to its owner's home ------------------------------------------------

def job_rel(name: str) -> Rel:
    """The job's directory: ``jobs/{name}``."""
    return (JOBS_DIR, name)


def output_rel(name: str) -> Rel:
    """The job's output directory: ``jobs/{name}/output``."""
    return (*job_rel(name), OUTPUT_DIR)


SNAPSHOT_DIR = "package"


def package_snapshot_rel(name: str) -> Rel:
    """Where a package elsewhere in PFS is copied when job ``name`` is submitted:
    ``jobs/{name}/package`` (a local package uploaded there is its own snapshot)."""
    return (*job_rel(name), SNAPSHOT_DIR)


def job_holds(name: str, parts: Rel) -> bool:
    """Whether ``parts`` (a path below the home) is in a directory of job ``name``'s own
    beside its output and checkpoints (where a local package is uploaded, where its snapshot
    goes): a package there is its own snapshot."""
    own = job_rel(name)
    return (len(parts) > len(own) and parts[:len(own)] == own
            and not parts[len(own)].startswith((OUTPUT_DIR, CHECKPOINTS_DIR,
                                                SITE_PACKAGES_PREFIX)))


def output_path(home: str, name: str) -> str:
    """The output directory below ``home`` (a PFS path, or a mount point as replicas see it)."""
    return "/".join((home, *output_rel(name)))


def output_aside(suffix: str) -> str:
    """The name an earlier output is kept under beside the new one: ``output-{suffix}``."""
    return f"{OUTPUT_DIR}-{suffix}"


def checkpoints_rel(name: str) -> Rel:
    """The job's checkpoint directory: ``jobs/{name}/checkpoints``."""
    return (*job_rel(name), CHECKPOINTS_DIR)


def checkpoints_path(home: str, name: str) -> str:
    """The checkpoint directory below ``home`` (a PFS path, or a mount point as replicas see
    it): ``PADDLE_CHECKPOINT_DIR``."""
    return "/".join((home, *checkpoints_rel(name)))


def checkpoints_aside(suffix: str) -> str:
    """The name an earlier job's checkpoints are kept under: ``checkpoints-{suffix}``."""
    return f"{CHECKPOINTS_DIR}-{suffix}"


def checkpoint_dirname(step: int) -> str:
    """A complete checkpoint's directory in the checkpoint directory: ``step-{step:012d}``
    (names sort as steps do)."""
    return f"{CHECKPOINT_PREFIX}{step:012d}"


def checkpoint_path(home: str, name: str, step: int) -> str:
    """Job ``name``'s checkpoint of ``step`` below ``home`` (as ``checkpoints_path``): what a
    job that resumes from it is given (``PADDLE_RESUME_FROM``)."""
    return f"{checkpoints_path(home, name)}/{checkpoint_dirname(step)}"


def checkpoint_step(dirname: str) -> int | None:
    """The step of a complete checkpoint's directory name; None for any other name (one
    being written, a marker, something a user put there)."""
    digits = dirname.removeprefix(CHECKPOINT_PREFIX)
    if digits == dirname or len(digits) != 12 or not digits.isdigit():
        return None
    return int(digits)


def checkpoint_tmpname(step: int, token: str) -> str:
    """Where a checkpoint is written before it is renamed to ``checkpoint_dirname``: hidden,
    never taken for a complete one."""
    return f".{checkpoint_dirname(step)}.tmp-{token}"


def is_output(dirname: str) -> bool:
    """Whether a directory of that name is a job's output, or an earlier one kept aside."""
    return dirname == OUTPUT_DIR or dirname.startswith(output_aside(""))


def site_packages_rel(name: str, key: str) -> Rel:
    """Where the pods of job ``name`` install its ``requirements.txt``, once for all of them:
    ``jobs/{name}/.site-packages-{key}``, ``key`` telling this job from an earlier one of the
    same name that may still run with its own."""
    return (*job_rel(name), f"{SITE_PACKAGES_PREFIX}{key}")


ENVS_REL: Rel = (".paddlecloud", "envs")
BUILDS_REL: Rel = (".paddlecloud", "builds")
# Where a runtime image built from a trainer package holds it (the seeds' path).
IMAGE_PACKAGE_DIR = "/train/package"


def build_log_rel(uid) -> Rel:
    """A runtime image build's log in its owner's home: ``.paddlecloud/builds/{uid}.log``."""
    return (*BUILDS_REL, f"{uid}.log")


def env_rel(digest: str) -> Rel:
    """An environment of the owner's Kubernetes jobs (``jobs.backends.environments``' digest of the
    requirements and image): ``.paddlecloud/envs/{digest}``, its packages in
    ``site-packages``, shared by every job of the owner that needs the same."""
    return (*ENVS_REL, digest)


def package_dirname(local_dirname: str) -> str:
    """What a local package directory is called when uploaded beside the output: its own
    name, or ``package`` when that would be taken by the output directory."""
    return "package" if local_dirname in ("", OUTPUT_DIR) else local_dirname


def package_path(home: str, name: str, local_dirname: str) -> str:
    """Where the local package directory ``local_dirname`` of job ``name`` is uploaded."""
    return "/".join((home, *job_rel(name), package_dirname(local_dirname)))


def node_dir(index: int) -> str:
    return f"node_{index}"


def log_relpath(role: str, index: int) -> str:
    """A replica's log under the job's output directory, as the seeds show:
    ``node_<index>/train.log`` (trainers) or ``node_<index>/server.log`` (pservers)."""
    kind = "train" if role == "trainer" else "server"
    return f"{node_dir(index)}/{kind}.log"


def metrics_relpath(role: str, index: int) -> str:
    """What a replica reports with ``paddlecloud_sdk.report``, beside its log:
    ``node_<index>/metrics.jsonl`` (trainers) or ``node_<index>/server-metrics.jsonl``
    (pservers: trainer 0 and pserver 0 share ``node_0``)."""
    name = METRICS_FILE if role == "trainer" else PSERVER_METRICS_FILE
    return f"{node_dir(index)}/{name}"

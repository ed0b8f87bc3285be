"""The file service: what users do with their PFS files, whichever storage holds them.

Views (``pfs.views``), the streaming endpoints (``pfs.transfer``) and the job services call
these functions; nothing here knows about HTTP.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.db.models.functions import Greatest
from django.utils import timezone

from accounts.selectors import quota_get, quotas_get
from accounts.signals import quota_changed
from kernel.errors import (
    ForbiddenError,
    NotFoundError,
    PaddleCloudError,
    TooLargeError,
    ValidationError,
)
from paddlecloud_core.quantity import format_bytes, format_bytes_about

from . import digests, tar
from .models import UploadSession, Usage
from .paths import PfsPath, pfs_check_access, pfs_path_parse, pfs_shown
from .storage import TEMP_PREFIX, ChecksumError, Entry, Rel, Storage, Upload, storage_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """A PFS path the caller may use: its storage and where it is below the area."""

    path: PfsPath
    storage: Storage

    @property
    def rel(self) -> Rel:
        return self.path.parts

    def child(self, rel: Rel) -> str:
        return self.storage.display(rel)


def pfs_target(user, datacenter, text: str, *, write: bool = False,
               field: str = "path") -> Target:
    """Parse and check ``text`` before any I/O: the storage and path to act on."""
    path = pfs_path_parse(text, field=field)
    pfs_check_access(user, datacenter, path, write=write, field=field)
    return Target(path, storage_for(datacenter, path))


# -- reading --------------------------------------------------------------------------------


def pfs_stat(user, datacenter, text: str, *, field: str = "path",
             follow: bool = False) -> tuple[Target, Entry]:
    """The entry at ``text``; with ``follow``, what a link there leads to."""
    target = pfs_target(user, datacenter, text, field=field)
    return target, target.storage.stat(target.rel, follow=follow)


def pfs_list(user, datacenter, text: str, *, recursive: bool = False
             ) -> tuple[Target, Entry, list[Entry]]:
    """The entry at ``text`` and what it holds: a directory's children (all descendants when
    ``recursive``), or the file itself."""
    target, entry = pfs_stat(user, datacenter, text)
    if entry.type != "dir" and not (entry.type == "link" and target.storage.is_dir(target.rel)):
        return target, entry, [entry]
    storage = target.storage
    entries = [e for e in (storage.walk(target.rel) if recursive else storage.listdir(target.rel))
               if pfs_shown(e.rel)]
    return target, entry, entries


# -- writing --------------------------------------------------------------------------------


def pfs_mkdir(user, datacenter, text: str, *, parents: bool = False) -> tuple[Target, Entry]:
    target = pfs_target(user, datacenter, text, write=True)
    return target, target.storage.mkdir(target.rel, parents=parents)


def pfs_remove(user, datacenter, text: str, *, recursive: bool = False) -> tuple[Target, int]:
    """Remove a file or a tree; a home that was over its quota (or not known) and is no longer
    announces it (``quota_changed``), so its owner's waiting jobs are admitted at once."""
    target = pfs_target(user, datacenter, text, write=True)
    blocked = user.pk in storage_problems(datacenter, [user.pk])
    freed = target.storage.remove(target.rel, recursive=recursive)
    if usage_add(user, datacenter, -freed):  # stale, or not known: what it names may be gone
        usage_measure(user, datacenter)
    if blocked and user.pk not in storage_problems(datacenter, [user.pk]):
        transaction.on_commit(lambda: quota_changed.send(sender=Usage, user=user,
                                                         datacenter=datacenter))
    return target, freed


# -- usage and the storage quota ------------------------------------------------------------
#
# Usage is the apparent size of the files in a home (st_size: what ``ls -l`` and
# ``du --apparent-size`` show, and how CephFS quotas and S3 count), upload temporaries left
# out: an upload in progress is counted by the room it reserves instead (its UploadSession).
# A home may not grow past its quota: used + reserved + incoming <= quota. A home over it (a
# job wrote past it) or whose last walk failed takes no new work: no upload, no submission,
# no job start (fail closed: a home the walk cannot measure could hold anything).


def _here(function, *args, **kwargs):
    """Run a database step on the calling thread (callers that do not mind blocking it)."""
    return function(*args, **kwargs)


def _home(user, datacenter) -> PfsPath:
    return PfsPath(datacenter.name, "home", user.username, ())


def usage_get(user, datacenter) -> Usage:
    """The home's usage, measured by a walk the first time it is asked for."""
    usage = Usage.objects.filter(user=user, datacenter=datacenter).first()
    return usage if usage is not None else usage_measure(user, datacenter)


MEASURE_TRIES = 3  # walks of a home written to meanwhile, before the last one is recorded


def usage_measure(user, datacenter, *, database=_here) -> Usage:
    """Walk the whole home and record what it holds (periodically, while the user's jobs run
    and as they end); or, when the walk fails, that it is not known and why.

    A write through the file service while the walk runs (``usage_add``: a removal, an
    upload) would be undone by recording the walk's figure, which may not see it: the figure
    is recorded only if no such write came meanwhile (the row's ``revision``), else the home
    is walked again, MEASURE_TRIES times at most (the last walk is recorded whatever came).
    Otherwise a user who removed files as their job ended could stay over their quota, and
    their queue held, until some later walk.

    The walks are done on the calling thread, the recording through ``database``."""
    for tries_left in range(MEASURE_TRIES - 1, -1, -1):
        revision = database(_usage_revision, user, datacenter)
        try:
            used, unknown = storage_for(datacenter, _home(user, datacenter)).usage(), ""
        except PaddleCloudError as exc:  # a tree deeper than PFS goes, say
            used, unknown = None, exc.message
        except OSError as exc:
            logger.exception("measuring the PFS home of %s in %s failed", user, datacenter)
            used, unknown = None, f"walking it failed ({exc.strerror or exc})"
        usage = database(_usage_record, user, datacenter, used, unknown,
                          revision if tries_left else None)
        if usage is not None:
            return usage
    raise AssertionError("unreachable: the last walk is recorded whatever came")


def _usage_revision(user, datacenter) -> int | None:
    return (Usage.objects.filter(user=user, datacenter=datacenter)
            .values_list("revision", flat=True).first())


def _usage_record(user, datacenter, used: int | None, unknown: str,
                  revision: int | None) -> Usage | None:
    """Record a walk's figure; None, recording nothing, if the home's row is no longer at
    ``revision`` (a write came since the walk began)."""
    defaults = {"unknown": unknown, "measured_at": timezone.now()}
    if used is not None:
        defaults["used"] = used
    if revision is not None:
        rows = Usage.objects.filter(user=user, datacenter=datacenter, revision=revision)
        if not rows.update(**defaults, updated_at=timezone.now()):
            return None
        return Usage.objects.get(user=user, datacenter=datacenter)
    usage, _ = Usage.objects.update_or_create(user=user, datacenter=datacenter,
                                              defaults=defaults)
    return usage


def usage_add(user, datacenter, delta: int) -> bool:
    """Count ``delta`` bytes more (or fewer) in the home, atomically and never below zero.

    True when the home must be measured again: there was no figure, or it is not known (the
    last walk failed), or ``delta`` takes more than it holds, so the figure was stale (a job
    wrote there behind the file service's back, e.g. a sparse file of 10 GiB; usage is then 0
    until measured)."""
    if not delta:
        return False
    with transaction.atomic():
        rows = Usage.objects.filter(user=user, datacenter=datacenter)
        used, unknown = rows.select_for_update().values_list("used", "unknown").first() or (
            None, "")
        if used is None:
            return True
        rows.update(used=Greatest(F("used") + delta, 0), revision=F("revision") + 1)
    return used + delta < 0 or bool(unknown)


def uploads_reserved(user, datacenter, *, exclude: UploadSession | None = None) -> int:
    """The bytes the user's uploads in progress reserve (all but ``exclude``)."""
    sessions = UploadSession.objects.filter(owner=user, datacenter=datacenter,
                                            completed_at__isnull=True)
    if exclude is not None:
        sessions = sessions.exclude(pk=exclude.pk)
    return sessions.aggregate(total=Sum("reserved"))["total"] or 0


@dataclass(frozen=True)
class UsageReport:
    used: int
    reserved: int
    limit: int
    measured_at: datetime | None
    unknown: str  # why ``used`` is not known (the last walk failed); blank when it is


def usage_report(user, datacenter) -> UsageReport:
    """What the home holds, what uploads in progress reserve, and the quota."""
    usage = usage_get(user, datacenter)
    return UsageReport(used=usage.used, reserved=uploads_reserved(user, datacenter),
                       limit=quota_get(user, datacenter).storage,
                       measured_at=usage.measured_at, unknown=usage.unknown)


def _unknown_message(unknown: str) -> str:
    return (f"the usage of your home is not known: measuring it failed: {unknown}; uploads, "
            "job submissions and job starts are refused until it can be measured")


def storage_problems(datacenter, user_ids) -> dict[int, tuple[str, str]]:
    """Each of ``user_ids`` whose home may take no new work in ``datacenter``: its usage is
    not known, or it holds more than its storage quota (a job wrote past it); with an error
    code and why. Two queries; a home never measured is measured when first asked about."""
    rows = list(Usage.objects.filter(datacenter=datacenter, user_id__in=list(user_ids))
                .values_list("user_id", "used", "unknown"))
    quotas = quotas_get(datacenter, [user_id for user_id, _, _ in rows]) if rows else {}
    problems = {}
    for user_id, used, unknown in rows:
        if unknown:
            problems[user_id] = ("usage_unknown", _unknown_message(unknown))
        elif used > (quota := quotas[user_id].storage):
            problems[user_id] = (
                "quota_exceeded",
                f"your home holds {format_bytes_about(used)}, over your storage quota of "
                f"{format_bytes(quota)} (jobs write into it); remove files or ask an "
                "administrator")
    return problems


def storage_check(user, datacenter, *, field: str = "storage") -> None:
    """Refuse new work (a job's submission) while the home is over its storage quota or its
    usage is not known, naming ``field``."""
    usage_get(user, datacenter)  # a first walk
    problem = storage_problems(datacenter, [user.pk]).get(user.pk)
    if problem is not None:
        code, message = problem
        raise ForbiddenError.for_field(field, message, code=code)


def storage_room(user, datacenter, size: int, *, field: str, what: str) -> None:
    """Refuse ``what`` (a copy the portal makes in the home, e.g. a job's package snapshot)
    of ``size`` bytes when it would bring the home over its storage quota, naming ``field``."""
    usage_get(user, datacenter)
    with transaction.atomic():
        quota, used, reserved = _storage_locked(user, datacenter, field)
        if used + reserved + size > quota:
            raise _over_quota(field, f"{what} of {format_bytes(size)}", used + reserved + size,
                              quota, used, reserved, "; nothing was copied")


def _storage_locked(user, datacenter, field: str, *, exclude: UploadSession | None = None
                    ) -> tuple[int, int, int]:
    """In a transaction: lock the home's usage, so that one user's checks and reservations
    happen one at a time, and answer the quota, the bytes used and those reserved; refused
    (naming ``field``) while the usage is not known."""
    used, unknown = Usage.objects.select_for_update().filter(
        user=user, datacenter=datacenter).values_list("used", "unknown").get()
    if unknown:
        raise ForbiddenError.for_field(field, _unknown_message(unknown), code="usage_unknown")
    return (quota_get(user, datacenter).storage, used,
            uploads_reserved(user, datacenter, exclude=exclude))


def _over_quota(field: str, what: str, after: int, quota: int, used: int, reserved: int,
                then: str = "") -> ForbiddenError:
    return ForbiddenError.for_field(
        field, f"{what} would bring your home to {format_bytes(after)}, over your storage "
               f"quota of {format_bytes(quota)} ({format_bytes(used)} used, "
               f"{format_bytes(reserved)} reserved by uploads in progress){then}; remove "
               "files or ask an administrator", code="quota_exceeded")


def _over_limit(field: str, what: str, then: str = "") -> TooLargeError:
    limit = settings.PADDLECLOUD_PFS_MAX_UPLOAD
    return TooLargeError.for_field(
        field, f"{what} is over the largest upload this portal accepts "
               f"({format_bytes(limit)}){then}")


def storage_reserve(session: UploadSession, *, replacing: int = 0) -> None:
    """Refuse, before any byte is stored, an upload over the size limit or the quota; else
    save ``session``, which reserves its size until it completes, is aborted or expires."""
    user, datacenter, incoming = session.owner, session.datacenter, session.size
    if incoming > settings.PADDLECLOUD_PFS_MAX_UPLOAD:
        raise _over_limit("size", format_bytes(incoming))
    usage_get(user, datacenter)  # a first walk, before the lock
    with transaction.atomic():
        quota, used, reserved = _storage_locked(user, datacenter, "size")
        after = used + reserved - replacing + incoming
        if incoming > replacing and after > quota:
            raise _over_quota("size", f"this upload of {format_bytes(incoming)}", after, quota,
                              used, reserved)
        session.reserved = incoming
        session.save()


RESERVE_STEP = 64 << 20  # a tar being unpacked reserves this much ahead, as far as it fits


def upload_reserve(session: UploadSession, total: int) -> int:
    """A tar being unpacked needs room for ``total`` bytes: reserve them (and a step ahead,
    as far as the quota goes, so that not every file asks) or refuse. Returns the bytes now
    reserved."""
    with transaction.atomic():
        quota, used, reserved = _storage_locked(session.owner, session.datacenter, "tar",
                                                exclude=session)
        if used + reserved + total > quota:
            raise _over_quota("tar", f"unpacking this tar to more than {format_bytes(total)}",
                              used + reserved + total, quota, used, reserved,
                              "; nothing was stored")
        granted = max(min(total + RESERVE_STEP, quota - used - reserved), session.size)
        if not UploadSession.objects.filter(pk=session.pk, completed_at__isnull=True).update(
                reserved=granted):
            raise _upload_gone(session.pk)
    return granted


# -- uploads --------------------------------------------------------------------------------


def upload_prepare(user, datacenter, *, path: str, size: int, sha256: str = "",
                   algorithm: str = digests.SHA256, checksum: str = "",
                   kind: str = "file", overwrite: bool = True, parents: bool = False,
                   checksum_later: bool = False, resumable: bool = False) -> UploadSession:
    """Check an upload before any byte is received; the session describing it, saved: it
    reserves the upload's size in the user's storage quota.

    The parent directory must exist (or ``parents`` creates it). A file must not land on a
    directory, nor on a file when ``overwrite`` is off; a tar is unpacked into a directory,
    created or merged into.

    The digest checked at the end is ``checksum`` in ``algorithm`` (one of
    ``digests.ALGORITHMS``), or ``sha256``.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValidationError.for_field("size", "the upload's size in bytes, 0 or more")
    if algorithm not in digests.ALGORITHMS:
        raise ValidationError.for_field(
            "algorithm", f"one of {', '.join(digests.ALGORITHMS)}", code="invalid")
    if sha256 and algorithm == digests.SHA256 and not checksum:
        checksum = sha256
    elif sha256:
        raise ValidationError.for_field(
            "sha256", f"send the checksum in {algorithm} (the algorithm named), as checksum")
    if not (checksum_later and checksum == "") and not digests.valid(algorithm, checksum):
        field = "sha256" if algorithm == digests.SHA256 else "checksum"
        raise ValidationError.for_field(field, digests.rule(algorithm))
    if kind not in UploadSession.Kind.values:
        raise ValidationError.for_field("kind", "'file' or 'tar'")
    target = pfs_target(user, datacenter, path, write=True)
    storage, rel = target.storage, target.rel
    storage.check_creatable(rel)
    parent = rel[:-1]
    try:
        parent_exists = storage.is_dir(parent)
    except NotFoundError:
        if not parents:
            raise NotFoundError.for_field(
                "path", f"{storage.display(parent)} does not exist: create it first "
                        "(paddlectl mkdir -p) or ask for parents", code="not_found") from None
        parent_exists = False
    else:
        if not parent_exists:
            raise storage.not_a_dir(parent)
    existing = _stat_or_none(storage, rel) if parent_exists else None
    if existing is not None:
        if kind == "file" and existing.type == "dir":
            raise storage.is_a_dir(rel)
        if kind == "tar" and existing.type == "file":
            raise storage.exists(rel)
        if kind == "file" and not overwrite:
            raise storage.exists(rel)
    session = UploadSession(owner=user, datacenter=datacenter, path=str(target.path),
                            kind=kind, size=size, sha256=checksum.lower(), algorithm=algorithm,
                            overwrite=overwrite,
                            resumable=resumable)
    storage_reserve(session, replacing=existing.size if existing else 0)
    if not parent_exists:  # only once the upload is admitted
        try:
            storage.mkdir(parent, parents=True)
        except BaseException:
            _upload_forget(session)
            raise
    return session


def _stat_or_none(storage: Storage, rel: Rel) -> Entry | None:
    try:
        return storage.stat(rel)
    except NotFoundError:
        return None


def upload_create(user, datacenter, **spec) -> UploadSession:
    """A resumable upload; its checksum may come now or with the last chunk."""
    return upload_prepare(user, datacenter, checksum_later=True, resumable=True, **spec)


def upload_get(user, datacenter, upload_id) -> UploadSession:
    try:
        upload_id = uuid.UUID(str(upload_id))
    except ValueError:
        session = None
    else:
        # With its owner and datacenter: the transfer opens the upload on a worker thread,
        # which must not query the database.
        session = UploadSession.objects.select_related("owner", "datacenter").filter(
            pk=upload_id, owner=user, datacenter=datacenter, resumable=True).first()
    if session is None:
        raise _upload_gone(upload_id)
    return session


def _upload_gone(upload_id) -> NotFoundError:
    return NotFoundError.for_field("upload", f"no upload {upload_id} in progress: it "
                                             "finished, failed or expired; start again")


def upload_abort(session: UploadSession) -> None:
    """Throw away what an upload received (a completed one is only forgotten), and release
    what it reserved."""
    if session.completed_at is None:
        upload_open(session).abort()
    _upload_forget(session)


def upload_discard(session: UploadSession, upload: Upload | None, *, database=_here) -> None:
    """An upload that failed while its bytes came: throw them away, release its room."""
    try:
        if upload is not None:
            upload.abort()
    finally:
        database(_upload_forget, session)


def _upload_forget(session: UploadSession) -> None:
    UploadSession.objects.filter(pk=session.pk).delete()


# Uploads being received stay open between the requests of one client, so the bytes already
# hashed are not read again; another process (or an evicted entry) reopens from the storage.
_OPEN: OrderedDict[str, Upload] = OrderedDict()
_OPEN_LOCK = threading.Lock()
_OPEN_MAX = 64


def _staging_rel(session: UploadSession, rel: Rel) -> Rel:
    """Where a tar upload's bytes are kept until unpacked: hidden, beside the target."""
    return (*rel[:-1], f"{TEMP_PREFIX}{session.pk}.tar")


def upload_open(session: UploadSession) -> Upload:
    """The storage upload receiving ``session``'s bytes (resumed where it stopped)."""
    key = str(session.pk)
    with _OPEN_LOCK:
        upload = _OPEN.pop(key, None)
    if upload is not None:
        return upload
    path = pfs_path_parse(session.path)
    storage = storage_for(session.datacenter, path)
    rel = path.parts if session.kind == "file" else _staging_rel(session, path.parts)
    upload = storage.upload(rel, key)
    upload.digest_with(digests.ALGORITHMS[session.algorithm])
    return upload


def upload_park(session: UploadSession, upload: Upload) -> None:
    """Keep an unfinished upload open for the client's next request."""
    with _OPEN_LOCK:
        _OPEN[str(session.pk)] = upload
        while len(_OPEN) > _OPEN_MAX:
            _, old = _OPEN.popitem(last=False)
            old.close()


def upload_progress(session: UploadSession, offset: int) -> None:
    if session.offset != offset:
        session.offset = offset
        UploadSession.objects.filter(pk=session.pk).update(
            offset=offset, updated_at=timezone.now())


def upload_checksum(session: UploadSession, header) -> None:
    """The checksum sent with the last chunk (``header(name)`` reads the request's headers):
    required unless declared at the start, and the same if it was."""
    name = digests.HEADERS[session.algorithm]
    checksum = header(name.lower())
    if checksum is None:
        if not session.sha256:
            raise ValidationError.for_field(
                name, f"required with the last chunk: the {session.algorithm} of the whole "
                      "upload (it was not declared when the upload started)")
        return
    if not digests.valid(session.algorithm, checksum):
        raise ValidationError.for_field(
            name, f"{digests.HEX_DIGITS[session.algorithm]} hexadecimal digits")
    if session.sha256 and session.sha256 != checksum.lower():
        raise ValidationError.for_field(
            name, f"differs from the {session.sha256} declared when the upload started")
    session.sha256 = checksum.lower()


def upload_complete(session: UploadSession, upload: Upload, *, database=_here) -> dict:
    """All bytes are in: check the checksum, then move the file into place (or unpack the
    tar) and count it in place of what the upload reserved. On any refusal nothing is stored
    and the upload is gone.

    The file work (a tar may take minutes to unpack) is done on the calling thread; each
    database step goes through ``database``, so the transfer runs this on a worker thread and
    only those steps on the one thread every transfer's database work shares.
    """
    try:
        result, delta = _upload_store(session, upload, database)
    except BaseException:
        database(_upload_forget, session)
        raise
    if database(_upload_done, session, delta, result):
        usage_measure(session.owner, session.datacenter, database=database)
    return result


def _upload_done(session: UploadSession, delta: int, result: dict) -> bool:
    """Count what was stored and release the reservation, at once; True when the usage must
    be measured again (see ``usage_add``)."""
    with transaction.atomic():
        stale = usage_add(session.owner, session.datacenter, delta)
        sessions = UploadSession.objects.filter(pk=session.pk)
        if session.resumable:  # kept a while, for a client whose last answer was lost
            sessions.update(offset=session.size, completed_at=timezone.now(), result=result)
        else:
            sessions.delete()
    return stale


def _upload_store(session: UploadSession, upload: Upload, database) -> tuple[dict, int]:
    """Store what was received; the answer, and the bytes the home grew by."""
    digest = upload.finish()
    if digest != session.sha256:
        upload.abort()
        raise ChecksumError.for_field(
            "sha256" if session.algorithm == digests.SHA256 else "checksum",
            f"the {format_bytes(upload.offset)} received hash to {digest} "
            f"({session.algorithm}), not {session.sha256} as declared; nothing was stored, "
            "upload again",
            code="checksum_mismatch")
    path = pfs_path_parse(session.path)
    storage = storage_for(session.datacenter, path)
    if session.kind == "file":
        replaced = getattr(_stat_or_none(storage, path.parts), "size", 0)
        entry = _committed(upload, overwrite=session.overwrite)
        return {"entry": entry_json(str(path), entry), "path": str(path)}, entry.size - replaced
    staged = _committed(upload, overwrite=True)
    files, written, replaced = tar.tar_extract(storage, staged.rel, path.parts,
                                               str(session.pk),
                                               account=_unpacking(session, database))
    return {"path": str(path), "files": files, "bytes": written}, written - replaced


def _unpacking(session: UploadSession, database):
    """What a tar may unpack: counted before each file is written, against the size limit and
    (reserving as it goes) the quota."""
    granted = session.reserved

    def account(total: int) -> None:
        nonlocal granted
        if total > settings.PADDLECLOUD_PFS_MAX_UPLOAD:
            raise _over_limit("tar", f"unpacking this tar to more than {format_bytes(total)}",
                              "; nothing was stored")
        if total > granted:
            granted = database(upload_reserve, session, total)

    return account


def _committed(upload: Upload, *, overwrite: bool) -> Entry:
    """Commit, or throw the bytes away: a refused upload leaves no temporary behind."""
    try:
        return upload.commit(overwrite=overwrite)
    except BaseException:
        upload.abort()
        raise


def uploads_purge() -> int:
    """Forget uploads nobody continued within PADDLECLOUD_PFS_UPLOAD_TTL, with their bytes
    (and completed ones after that time too)."""
    cutoff = timezone.now() - timezone.timedelta(seconds=settings.PADDLECLOUD_PFS_UPLOAD_TTL)
    stale = list(UploadSession.objects.filter(updated_at__lt=cutoff)
                 .select_related("datacenter", "owner"))
    for session in stale:
        try:
            upload_abort(session)
        except PaddleCloudError:
            session.delete()
    return len(stale)


# -- answers --------------------------------------------------------------------------------


def entry_json(path: str, entry: Entry, *, name: str | None = None) -> dict:
    return {
        "name": entry.name if name is None else name,
        "path": path,
        "type": entry.type,
        "size": entry.size,
        "mtime": datetime.fromtimestamp(entry.mtime, UTC).isoformat().replace("+00:00", "Z"),
        "target": entry.target,
    }

"""What an upload may take of a home, counted truthfully (issue 14, findings 3 to 5).

- A tar is counted by what it unpacks, compressed or not, against the storage quota and the
  size limit as it streams; its members and how far it expands are capped; and it is unpacked
  off the thread every transfer's database work shares, so no one else waits for it.
- An accepted upload reserves its declared size until it completes, is aborted or expires, so
  uploads accepted together cannot overrun the quota.
- Usage is the files' apparent size and never goes below zero, whatever a job leaves behind.
"""

from __future__ import annotations

import html
import io
import os
import tarfile
import threading
import time
import zlib
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.utils import timezone

from accounts.models import Quota
from kernel.errors import PaddleCloudError
from pfs import services
from pfs.models import UploadSession, Usage
from pfs.storage.posix import PosixStorage
from pfs.tar import tar_extract

from .test_api import (
    HOME,
    KiB,
    MiB,
    Pfs,
    check_error,
    eventually,
    on_disk,
    plant,
    query,
    set_storage_quota,
    sha,
    temporaries,
)

GiB = 1024 * MiB


@pytest.fixture
def pfs(live_portal) -> Pfs:
    pfs = Pfs(live_portal)
    yield pfs
    pfs.http.close()


def packed(members: dict[str, bytes], mode: str) -> bytes:
    """A tar of ``members`` written with ``mode`` (``w``, ``w:gz``, ``w:bz2``, ``w:xz``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zeros_gz(name: str, size: int) -> bytes:
    """A gzipped tar of one file of ``size`` zero bytes, made without holding them."""
    info = tarfile.TarInfo(name)
    info.size = size
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    parts = [packer.compress(info.tobuf(format=tarfile.PAX_FORMAT))]
    block = bytes(16 * MiB)
    for _ in range(size // len(block)):
        parts.append(packer.compress(block))
    parts.append(packer.compress(bytes(size % len(block) + 2 * tarfile.BLOCKSIZE)))
    return b"".join([*parts, packer.flush()])


def usage(pfs) -> tuple[int, int]:
    """(used, reserved) as GET /pfs/usage answers."""
    answer = pfs.usage()
    return answer["used"], answer["reserved"]


def unpacking(home: Path) -> list[str]:
    """The hidden directories tars are being unpacked into."""
    return [name for name in temporaries(home) if name.endswith(".d")]


# -- 3. a tar is counted by what it unpacks ------------------------------------------------


def test_a_compressed_tar_counts_what_it_unpacks_against_the_quota(pfs, live_portal, home):
    set_storage_quota(live_portal, 1 * MiB)
    plant(home, {"old.bin": b"x" * 100})
    assert pfs.usage()["used"] == 100

    for mode in ("w:gz", "w:bz2", "w:xz"):
        data = packed({"a.txt": b"a" * 1000, "zeros": bytes(8 * MiB)}, mode)
        assert len(data) < 64 * KiB  # what the quota saw before: far under it
        resumable = pfs.started("by-chunks", data, kind="tar")
        for response in (pfs.put("d", data, tar=True), pfs.patch(resumable, 0, data)):
            body = check_error(response, 403, "quota_exceeded", "tar")
            assert "nothing was stored" in body["message"], body
            assert "quota of 1Mi" in body["message"], body

    # No file, no staged tar, no half-unpacked directory; nothing counted, nothing reserved.
    assert on_disk(home) == {"old.bin": b"x" * 100}
    assert usage(pfs) == (100, 0)
    fits = packed({"zeros": bytes(500 * KiB)}, "w:xz")
    assert pfs.put("d", fits, tar=True).status_code == 201
    assert usage(pfs) == (100 + 500 * KiB, 0)


def test_a_compressed_tar_over_the_size_limit_is_refused(pfs, home, settings):
    settings.PADDLECLOUD_PFS_MAX_UPLOAD = 1 * MiB
    data = packed({"a": bytes(600 * KiB), "b": bytes(600 * KiB)}, "w:xz")
    assert len(data) < 10 * KiB

    body = check_error(pfs.put("d", data, tar=True), 413, "too_large", "tar")

    assert "largest upload" in body["message"] and "nothing was stored" in body["message"]
    assert on_disk(home) == {}
    assert usage(pfs) == (0, 0)


def test_a_tar_is_counted_before_each_file_is_written(tmp_path, settings):
    """The quota and the size limit stop a tar at the first file over them: its bytes are
    never written."""
    storage = PosixStorage(HOME, tmp_path)
    storage.write_bytes(("up.tar",), packed({"a": b"a" * 600, "b": b"b" * 600}, "w:gz"), "t")
    seen = []

    def account(total):
        staging = tmp_path / ".pfs-upload-t.d"
        seen.append((total, sorted(p.name for p in staging.iterdir())))
        if total > 1000:
            raise PaddleCloudError("over")

    with pytest.raises(PaddleCloudError):
        tar_extract(storage, ("up.tar",), ("dest",), "t", account=account)

    assert seen == [(600, []), (1200, ["a"])]  # b was refused before any of it was written
    assert list(tmp_path.iterdir()) == []


def test_a_tar_may_hold_so_many_members_and_expand_so_far(pfs, home, settings):
    settings.PADDLECLOUD_PFS_TAR_MAX_MEMBERS = 10
    settings.PADDLECLOUD_PFS_TAR_RATIO_FLOOR = 1 * MiB

    many = packed({f"f{i}": b"" for i in range(11)}, "w")
    body = check_error(pfs.put("many", many, tar=True), 413, "too_large", "tar")
    assert "more than 10 members" in body["message"] and "nothing was stored" in body["message"]

    bomb = packed({"zeros": bytes(4 * MiB)}, "w:gz")  # ~1000:1
    body = check_error(pfs.put("bomb", bomb, tar=True), 413, "too_large", "tar")
    assert "200 times" in body["message"], body

    assert on_disk(home) == {}
    assert usage(pfs) == (0, 0)
    # What real data does is fine: as many members as allowed, and ordinary ratios.
    random = os.urandom(4 * MiB)
    for name, data in [("ten", packed({f"f{i}": b"x" for i in range(10)}, "w")),
                       ("plain", packed({"r": random}, "w")),
                       ("gz", packed({"r": random}, "w:gz")),
                       ("small", packed({"zeros": bytes(512 * KiB)}, "w:gz"))]:
        assert pfs.put(name, data, tar=True).status_code == 201, name


def test_a_long_unpack_holds_up_no_other_transfer(pfs, live_portal, home, settings):
    """While alice's tar unpacks, bob downloads a file through the byte endpoint and calls the
    API, and both are answered before the unpack ends."""
    settings.PADDLECLOUD_PFS_TAR_MAX_RATIO = 10_000
    from accounts.services import user_upsert
    from tests.conftest import PASSWORD

    bob = user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])[0]
    plant(home.parent / "bob", {"data.bin": b"b" * MiB})
    other = Pfs(live_portal, bob)
    data = zeros_gz("zeros", 512 * MiB)  # ~2 MiB, seconds to unpack
    answer = {}
    upload = threading.Thread(target=lambda: answer.update(put=pfs.put("big", data, tar=True)))
    upload.start()
    try:
        assert eventually(lambda: unpacking(home), timeout=30), "the unpack never started"

        started = time.monotonic()
        download = other.get("data.bin")
        api = other.usage_response()
        waited = time.monotonic() - started

        still_unpacking = bool(unpacking(home)) and upload.is_alive()
    finally:
        upload.join(120)
        other.http.close()
    assert (download.status_code, download.content) == (200, b"b" * MiB)
    assert api.status_code == 200, api.text
    assert still_unpacking, f"bob was answered only once the unpack was over ({waited:.2f} s)"
    assert answer["put"].status_code == 201, answer["put"].text
    assert (home / "big" / "zeros").stat().st_size == 512 * MiB
    (home / "big" / "zeros").unlink()  # not kept with the test's other files


# -- 4. accepted uploads reserve their size --------------------------------------------------


def test_accepted_uploads_reserve_their_size(pfs, live_portal, home):
    set_storage_quota(live_portal, 100 * KiB)
    a, b, c = (os.urandom(45 * KiB) for _ in range(3))
    first, second = pfs.started("a", a), pfs.started("b", b)

    body = check_error(pfs.start("c", c), 403, "quota_exceeded", "size")
    assert "90Ki reserved by uploads in progress" in body["message"], body
    check_error(pfs.put("c", c), 403, "quota_exceeded", "size")
    assert usage(pfs) == (0, 90 * KiB)

    assert pfs.patch(first, 0, a).status_code == 201  # stored: counted as used instead
    assert usage(pfs) == (45 * KiB, 45 * KiB)
    assert pfs.patch(second, 0, b[:KiB]).status_code == 200  # partial bytes: reserved already
    assert usage(pfs) == (45 * KiB, 45 * KiB)
    assert pfs.abort(second).status_code == 204
    assert usage(pfs) == (45 * KiB, 0)
    assert pfs.put("c", c).status_code == 201
    assert usage(pfs) == (90 * KiB, 0)
    assert on_disk(home) == {"a": a, "c": c}


def test_a_single_request_upload_reserves_its_size_while_it_streams(pfs, live_portal, home):
    set_storage_quota(live_portal, 100 * KiB)
    data = os.urandom(80 * KiB)
    target = "/content" + query(path=f"{HOME}/f.bin")

    with pfs.cut_off("PUT", target, data, 10 * KiB, {"X-Checksum-Sha256": sha(data)}):
        assert eventually(lambda: temporaries(home)), "the server never started receiving"
        check_error(pfs.start("g", os.urandom(45 * KiB)), 403, "quota_exceeded", "size")
        assert usage(pfs) == (0, 80 * KiB)
        # The PUT's room cannot be taken over through the resumable endpoints either.
        upload_id = str(UploadSession.objects.get().pk)
        check_error(pfs.upload(upload_id), 404, "not_found", "upload")
        check_error(pfs.patch(upload_id, 0, data), 404, "not_found", "upload")

    assert eventually(lambda: usage(pfs) == (0, 0)), usage(pfs)  # the connection dropped
    assert pfs.started("g", os.urandom(45 * KiB))
    assert not temporaries(home)


def test_an_expired_upload_releases_its_room(pfs, live_portal, home):
    set_storage_quota(live_portal, 100 * KiB)
    data = os.urandom(90 * KiB)
    upload_id = pfs.started("f", data)
    assert pfs.patch(upload_id, 0, data[:10 * KiB]).status_code == 200
    check_error(pfs.start("g", os.urandom(20 * KiB)), 403, "quota_exceeded", "size")

    UploadSession.objects.update(updated_at=timezone.now() - timedelta(days=2))
    assert services.uploads_purge() == 1

    assert usage(pfs) == (0, 0)
    assert not temporaries(home)
    assert pfs.started("g", os.urandom(20 * KiB))


@pytest.mark.django_db(transaction=True)
def test_parallel_uploads_are_accepted_exactly_as_far_as_they_fit(pfs_home, alice, datacenter):
    """Each check and its reservation happen together, one user's at a time."""
    Quota.objects.update_or_create(user=alice, datacenter=datacenter,
                                   defaults={"storage": 100 * MiB})
    services.usage_get(alice, datacenter)
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def create(index: int) -> None:
        try:
            start.wait()
            services.upload_create(alice, datacenter, path=f"{HOME}/f{index}",
                                   size=30 * MiB, sha256="0" * 64)
            outcomes.append("accepted")
        except PaddleCloudError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(outcomes) == ["accepted"] * 3 + ["quota_exceeded"] * 5
    assert services.uploads_reserved(alice, datacenter) == 90 * MiB


def test_the_files_and_quota_pages_show_what_uploads_reserve(pfs_home, alice, datacenter):
    services.upload_create(alice, datacenter, path=f"{HOME}/f", size=5 * KiB, sha256="0" * 64)
    browser = Client()
    browser.force_login(alice)

    files, quota = (html.unescape(browser.get(page).content.decode()).replace("\xa0", " ")
                    for page in ("/files/", "/quota/"))

    # The same way on both pages.
    assert "5Ki reserved by uploads in progress" in files
    assert "5Ki reserved by uploads in progress" in quota


# -- 5. usage is apparent size and never negative ---------------------------------------------


def test_removing_a_sparse_file_a_job_made_never_takes_usage_below_zero(pfs, live_portal,
                                                                         home):
    set_storage_quota(live_portal, 1000)
    plant(home, {"old.bin": b"x" * 100})
    assert pfs.usage()["used"] == 100  # measured
    (home / "jobs").mkdir()
    with open(home / "jobs" / "sparse.bin", "wb") as sparse:  # as a job makes it, after that
        sparse.truncate(10 * GiB)

    response = pfs.rm("jobs/sparse.bin")

    assert response.status_code == 200, response.text
    assert response.json()["freed"] == 10 * GiB  # apparent size, as usage counts it
    assert pfs.usage()["used"] == 100  # measured again, not 100 - 10 GiB
    check_error(pfs.put("big.bin", os.urandom(2000)), 403, "quota_exceeded", "size")
    assert pfs.put("fits.bin", os.urandom(900)).status_code == 201
    check_error(pfs.put("one-more", b"x"), 403, "quota_exceeded", "size")
    assert usage(pfs) == (1000, 0)


def test_usage_counts_apparent_sizes(tmp_path):
    with open(tmp_path / "sparse", "wb") as sparse:
        sparse.truncate(GiB)
    (tmp_path / "small").write_bytes(b"x" * 10)

    assert PosixStorage(HOME, tmp_path).usage() == GiB + 10  # as du --apparent-size


def test_a_removal_while_the_home_is_walked_is_not_undone_by_the_walks_figure(
        pfs_home, alice, datacenter):
    """A user removes files as their job ends, while the end's measure walks the home: the
    removal comes between the walk and its recording. The figure recorded is what the home
    holds, not the walk's (which would keep the user over their quota, their uploads refused
    and their queue held, until some later walk)."""
    (pfs_home / "kept.bin").write_bytes(b"k" * 100)
    (pfs_home / "removed.bin").write_bytes(b"r" * 200)
    assert services.usage_get(alice, datacenter).used == 300
    removed = []

    def database(step, *args):
        if step is services._usage_record and not removed:  # the walk done, not yet recorded
            removed.append(services.pfs_remove(alice, datacenter, f"{HOME}/removed.bin"))
        return step(*args)

    assert services.usage_measure(alice, datacenter, database=database).used == 100
    assert removed and Usage.objects.get(user=alice, datacenter=datacenter).used == 100


@pytest.mark.django_db(transaction=True)
def test_the_database_holds_usage_at_zero_or_more(alice, datacenter):
    Usage.objects.create(user=alice, datacenter=datacenter, used=100)

    with pytest.raises(IntegrityError), transaction.atomic():
        Usage.objects.filter(user=alice).update(used=-1)
    assert services.usage_add(alice, datacenter, -1000) is True  # stale: measure again
    assert Usage.objects.get(user=alice).used == 0


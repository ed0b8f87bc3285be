"""A full file system under PFS: an upload (a single PUT, or a resumable upload's chunk)
answers 507 ``storage_full`` "the file service is full", and leaves nothing half written: no
file, no temporary, the space its bytes took given back. alice's home is a small tmpfs the test
mounts (and unmounts, whatever happens)."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from tests.factories import HOME

CONTENT = "/api/v1/pfs/content"
KiB = 1024
SIZE = 256 * KiB  # the file system under alice's home


@pytest.fixture
def full_home(live_portal):
    home = live_portal.home
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0755", "pfs-full",
                    str(home)], check=True)
    try:
        yield home
    finally:  # (lazily, should a failed test have left a file open there)
        if subprocess.run(["umount", str(home)]).returncode:
            subprocess.run(["umount", "--lazy", str(home)], check=True)


def used(path) -> int:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def assert_full(response) -> None:
    assert response.status_code == 507, response.text
    assert response.json() == {"code": "storage_full", "message": "the file service is full",
                               "fields": {}}


def test_a_put_to_a_full_file_system_is_507_and_leaves_nothing(live_portal, full_home):
    data = os.urandom(2 * SIZE)
    response = live_portal.http.put(
        f"{live_portal.url}{CONTENT}", params={"path": f"{HOME}/big.bin"}, data=data,
        headers={"X-Checksum-Sha256": hashlib.sha256(data).hexdigest()})
    assert_full(response)
    assert os.listdir(full_home) == []
    assert used(full_home) < 16 * KiB

    small = b"it fits\n"  # and the space is there again
    response = live_portal.http.put(
        f"{live_portal.url}{CONTENT}", params={"path": f"{HOME}/small.txt"}, data=small,
        headers={"X-Checksum-Sha256": hashlib.sha256(small).hexdigest()})
    assert response.status_code == 201, response.text
    assert (full_home / "small.txt").read_bytes() == small


def test_a_resumable_chunk_to_a_full_file_system_is_507_and_keeps_what_was_whole(
        live_portal, full_home):
    data = os.urandom(2 * SIZE)
    created = live_portal.http.post(f"{live_portal.url}/api/v1/pfs/uploads", json={
        "path": f"{HOME}/big.bin", "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest()})
    assert created.status_code == 201, created.text
    url = f"{live_portal.url}/api/v1/pfs/uploads/{created.json()['id']}"
    first = SIZE // 4
    sent = live_portal.http.patch(url, data=data[:first], headers={"Upload-Offset": "0"})
    assert sent.status_code == 200, sent.text

    assert_full(live_portal.http.patch(url, data=data[first:],
                                       headers={"Upload-Offset": str(first)}))
    # The upload holds the chunk it had whole, not a part of the one that did not fit.
    assert live_portal.http.get(url).json()["offset"] == first
    assert not (full_home / "big.bin").exists()
    [temporary] = os.listdir(full_home)
    assert (full_home / temporary).stat().st_size == first
    assert used(full_home) < first + 16 * KiB

    assert live_portal.http.delete(url).status_code == 204
    assert os.listdir(full_home) == []

"""The file service API on a datacenter whose PFS is an S3 bucket (moto's server): the same
requests users make on POSIX work the same way."""

from __future__ import annotations

import hashlib
import io
import tarfile
import uuid

import boto3
import pytest

from tests.factories import HOME

from .conftest import S3_KEYS


@pytest.fixture
def s3_portal(live_portal, s3_endpoint, settings):
    bucket = f"pfs-{uuid.uuid4().hex}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name=S3_KEYS["region"],
                 aws_access_key_id=S3_KEYS["access_key"],
                 aws_secret_access_key=S3_KEYS["secret_key"]).create_bucket(Bucket=bucket)
    settings.PADDLECLOUD_S3_ACCESS_KEY_ID = S3_KEYS["access_key"]
    settings.PADDLECLOUD_S3_SECRET_ACCESS_KEY = S3_KEYS["secret_key"]
    datacenter = live_portal.datacenter
    datacenter.pfs_storage = "s3"
    datacenter.s3_bucket = bucket
    datacenter.s3_endpoint_url = s3_endpoint
    datacenter.s3_region = S3_KEYS["region"]
    datacenter.save()
    live_portal.api = live_portal.url + "/api/v1/pfs"
    return live_portal


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_files_round_trip_through_s3(s3_portal):
    http, api = s3_portal.session(), s3_portal.api
    assert http.post(f"{api}/mkdir", json={"path": f"{HOME}/data/raw", "parents": True}
                     ).status_code == 201
    small = b"1,2,3\n" * 100
    response = http.put(f"{api}/content", params={"path": f"{HOME}/data/raw/a.csv"},
                        data=small, headers={"X-Checksum-Sha256": _sha(small)})
    assert response.status_code == 201, response.text
    assert response.json()["size"] == len(small)

    # A resumable upload in two chunks, the first over S3's part minimum.
    big = bytes(range(256)) * (40 * 1024 * 10)  # 10 MiB
    upload = http.post(f"{api}/uploads", json={"path": f"{HOME}/data/big.bin",
                                               "size": len(big), "sha256": _sha(big)}).json()
    first = http.patch(f"{api}/uploads/{upload['id']}", data=big[:9 << 20],
                       headers={"Upload-Offset": "0"})
    assert first.json()["offset"] == 9 << 20
    assert http.get(f"{api}/stat", params={"path": f"{HOME}/data/big.bin"}).status_code == 404
    done = http.patch(f"{api}/uploads/{upload['id']}", data=big[9 << 20:],
                      headers={"Upload-Offset": str(9 << 20)})
    assert done.status_code == 201 and done.json()["complete"], done.text

    listing = http.get(f"{api}/files", params={"path": f"{HOME}/data", "recursive": 1}).json()
    assert [(e["name"], e["type"], e["size"]) for e in listing["entries"]] == [
        ("big.bin", "file", len(big)), ("raw", "dir", 0), ("raw/a.csv", "file", len(small))]
    ranged = http.get(f"{api}/content", params={"path": f"{HOME}/data/big.bin"},
                      headers={"Range": "bytes=100-199"})
    assert ranged.status_code == 206 and ranged.content == big[100:200]
    assert http.get(f"{api}/content", params={"path": f"{HOME}/data/big.bin"}
                    ).content == big

    with tarfile.open(fileobj=io.BytesIO(http.get(
            f"{api}/content", params={"path": f"{HOME}/data"}).content)) as archive:
        assert sorted(archive.getnames()) == ["big.bin", "raw", "raw/a.csv"]
        assert archive.extractfile("raw/a.csv").read() == small

    assert http.get(f"{api}/usage").json()["used"] == len(big) + len(small)
    removed = http.delete(f"{api}/files", params={"path": f"{HOME}/data", "recursive": 1})
    assert removed.json()["freed"] == len(big) + len(small)
    assert http.get(f"{api}/files", params={"path": HOME}).json()["entries"] == []


def test_a_directory_tar_and_a_bad_checksum_on_s3(s3_portal):
    http, api = s3_portal.session(), s3_portal.api
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in [("pkg/train.py", b"print('hi')"), ("pkg/conf/a.yaml", b"a: 1")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    response = http.put(f"{api}/content", params={"path": f"{HOME}/job1"}, data=data,
                        headers={"X-Checksum-Sha256": _sha(data),
                                 "Content-Type": "application/x-tar"})
    assert response.json() == {"path": f"{HOME}/job1", "files": 2, "bytes": 15}
    assert http.get(f"{api}/content", params={"path": f"{HOME}/job1/pkg/train.py"}
                    ).content == b"print('hi')"

    wrong = http.put(f"{api}/content", params={"path": f"{HOME}/x.bin"}, data=b"abc",
                     headers={"X-Checksum-Sha256": _sha(b"abd")})
    assert wrong.status_code == 422 and wrong.json()["code"] == "checksum_mismatch"
    names = [e["name"] for e in http.get(f"{api}/files", params={"path": HOME}).json()["entries"]]
    assert names == ["job1"]  # no x.bin, no temporary

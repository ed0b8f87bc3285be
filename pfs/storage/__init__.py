"""The storage behind one PFS area, chosen by the datacenter's configuration."""

from __future__ import annotations

from django.conf import settings

from pfs.paths import PfsPath, pfs_area_root

from .base import CHUNK, TEMP_PREFIX, ChecksumError, Entry, Rel, Storage, Upload
from .posix import PosixStorage

__all__ = ["CHUNK", "TEMP_PREFIX", "ChecksumError", "Entry", "Rel", "Storage", "Upload",
           "storage_for"]


def storage_for(datacenter, path: PfsPath) -> Storage:
    """The storage of the area ``path`` is in (a home is created on first use)."""
    if datacenter.pfs_storage == "s3":
        from .s3 import S3Storage  # here: boto3 is loaded only where a datacenter uses S3

        prefix = path.area_label.removeprefix("/pfs/")
        return S3Storage(
            path.area_label, bucket=datacenter.s3_bucket, prefix=prefix,
            endpoint_url=datacenter.s3_endpoint_url or None,
            region=datacenter.s3_region or None,
            access_key=settings.PADDLECLOUD_S3_ACCESS_KEY_ID,
            secret_key=settings.PADDLECLOUD_S3_SECRET_ACCESS_KEY,
            read_only=path.public,
        )
    root = pfs_area_root(datacenter, path)
    root.mkdir(parents=True, exist_ok=True)
    return PosixStorage(path.area_label, root, read_only=path.public)

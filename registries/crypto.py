"""Registry passwords encrypted at rest with Fernet (AES-128-CBC + HMAC-SHA256).

The keys are ``PADDLECLOUD_CREDENTIAL_KEYS``: a comma-separated list of Fernet keys, the first
one encrypting, every one decrypting. To rotate, put a new key first, keep the old ones after
it, and run ``manage.py rotate_credential_keys``, which re-encrypts every password with the new
key; then the old keys can be dropped. A debug install without the setting gets one key made
once into ``var/credential_keys`` (as SECRET_KEY does).
"""

from __future__ import annotations

from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction


class CredentialKeyError(Exception):
    """A stored password cannot be decrypted with any configured key."""


def _key_file_keys() -> list[str]:
    path = settings.VAR_DIR / "credential_keys"
    if not path.exists():
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(Fernet.generate_key().decode() + "\n")
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def configured_keys() -> list[str]:
    keys = list(settings.PADDLECLOUD_CREDENTIAL_KEYS)
    if keys:
        return keys
    if not settings.DEBUG:
        raise ImproperlyConfigured(
            "PADDLECLOUD_CREDENTIAL_KEYS is not set: with DEBUG off, give at least one Fernet "
            'key (python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())")')
    return _key_file_keys()


@cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except ValueError:
        raise ImproperlyConfigured(
            "PADDLECLOUD_CREDENTIAL_KEYS: each key must be 32 url-safe base64-encoded bytes "
            "(Fernet.generate_key())") from None


def fernet() -> MultiFernet:
    return _fernet(tuple(configured_keys()))


def encrypt(plaintext: str) -> bytes:
    return fernet().encrypt(plaintext.encode())


def decrypt(token: bytes) -> str:
    try:
        return fernet().decrypt(bytes(token)).decode()
    except InvalidToken:
        raise CredentialKeyError(
            "a registry password cannot be decrypted with any key in "
            "PADDLECLOUD_CREDENTIAL_KEYS (was a key removed before rotate_credential_keys "
            "ran?)") from None


def rotate(token: bytes) -> bytes:
    """The same password, encrypted with the first (newest) key."""
    try:
        return fernet().rotate(bytes(token))
    except InvalidToken:
        raise CredentialKeyError("a registry password cannot be decrypted with any key in "
                                 "PADDLECLOUD_CREDENTIAL_KEYS") from None


def rows_rotate(model, field: str) -> int:
    """Encrypt ``field`` of every row of ``model`` (empty ones left out) again with the newest
    key, a row at a time under its lock. Returns how many."""
    count = 0
    for pk in model.objects.filter(**{f"{field}__isnull": False}).values_list(
            "pk", flat=True).iterator():
        with transaction.atomic():
            token = model.objects.select_for_update().filter(pk=pk).values_list(
                field, flat=True).first()
            if token is None:
                continue
            model.objects.filter(pk=pk).update(**{field: rotate(token)})
            count += 1
    return count

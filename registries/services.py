"""What users do with registry credentials. The password is encrypted before it is stored and
is decrypted only for the backend that writes the pull secret; nothing returns it."""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction

from accounts.audit import audit_record
from accounts.models import AuditEntry
from jobs.states import FINAL_JOB_STATES
from kernel.errors import ConflictError, NotFoundError, ValidationError
from kernel.queue import PULL_SECRET_REMOVE, PULL_SECRET_SYNC, task_later
from paddlecloud_core.contract import JOB_NAME_RE

from . import crypto
from .models import Registry

NAME_MAX = 40
USERNAME_MAX = 256
PASSWORD_MAX = 8192  # a GCR/Artifact Registry JSON key is ~2.5 KB
_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
SERVER_RE = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::(\d{{1,5}}))?$")


def _name_problem(name) -> str | None:
    if not isinstance(name, str) or not name:
        return "required: your name for these credentials, e.g. my-registry"
    if len(name) > NAME_MAX:
        return f"at most {NAME_MAX} characters"
    if not JOB_NAME_RE.match(name):
        return ("only lower-case letters, digits and '-', starting and ending with a letter "
                "or digit")
    return None


def _server_problem(server) -> str | None:
    if not isinstance(server, str) or not server:
        return "required: the registry's host[:port], e.g. registry.example.com:5000"
    if "://" in server:
        return f"{server!r}: write the host[:port] alone, without {server.split('://')[0]}://"
    match = SERVER_RE.match(server) if len(server) <= 253 else None
    if match is None:
        return f"{server!r} is not a host[:port] like registry.example.com or 10.0.0.5:5000"
    if match.group(1) is not None and not 1 <= int(match.group(1)) <= 65535:
        return f"port {match.group(1)} is not between 1 and 65535"
    return None


def _username_problem(username) -> str | None:
    if not isinstance(username, str) or not username.strip():
        return "required: your user name at the registry"
    if len(username) > USERNAME_MAX:
        return f"at most {USERNAME_MAX} characters"
    if ":" in username or any(ord(c) < 32 for c in username):
        return "may not contain ':' or control characters"
    return None


def _password_problem(password) -> str | None:
    if not isinstance(password, str) or not password:
        return "required: your password or access token at the registry"
    if len(password) > PASSWORD_MAX:
        return f"at most {PASSWORD_MAX} characters"
    return None


CHECKS = {"name": _name_problem, "server": _server_problem, "username": _username_problem,
          "password": _password_problem}


def _duplicate(name: str) -> str:
    return (f"you already have registry credentials named {name!r}: delete them first or "
            "pick another name")


def _check(data: dict, fields, taken=None) -> dict:
    """The given ``fields`` of ``data``, each checked; one error naming every bad field.
    ``taken`` is the query of the user's credentials a new name must not be in."""
    if not isinstance(data, dict):
        raise ValidationError("the registry must be a JSON object")
    errors = {key: ["unknown field"] for key in sorted(set(data) - set(CHECKS))}
    for field in fields:
        if (problem := CHECKS[field](data.get(field))) is not None:
            errors[field] = [problem]
    if taken is not None and "name" not in errors and taken.filter(name=data["name"]).exists():
        errors["name"] = [_duplicate(data["name"])]
    if errors:
        raise ValidationError("; ".join(f"{k}: {v[0]}" for k, v in errors.items()),
                              fields=errors)
    return {field: data[field] for field in fields}


def registry_list(user, datacenter):
    return Registry.objects.filter(owner=user, datacenter=datacenter)


def registry_get(user, datacenter, name: str) -> Registry:
    registry = registry_list(user, datacenter).filter(name=name).first()
    if registry is None:
        raise NotFoundError.for_field(
            "registry", f"you have no registry credentials named {name!r} in datacenter "
                        f"{datacenter.name!r} (paddlectl get registry lists them; paddlectl "
                        "registry -name NAME -server … -username … adds some)")
    return registry


def registry_password(registry: Registry) -> str:
    """The plain password, for the backend writing the pull secret only."""
    return crypto.decrypt(registry.password_encrypted)


def registry_create_check(user, datacenter, data: dict) -> dict:
    """What ``registry_create`` checks before it makes anything: every field, at once."""
    return _check(data, ("name", "server", "username", "password"),
                  taken=registry_list(user, datacenter))


def registry_create(user, datacenter, data: dict) -> Registry:
    values = registry_create_check(user, datacenter, data)
    try:
        with transaction.atomic():
            registry = Registry.objects.create(
                owner=user, datacenter=datacenter, name=values["name"],
                server=values["server"], username=values["username"].strip(),
                password_encrypted=crypto.encrypt(values["password"]))
            audit_record(user, AuditEntry.Action.REGISTRY_CREATE,
                         f"{user.username}/{registry.name}", datacenter=datacenter,
                         server=registry.server, username=registry.username)
            task_later(PULL_SECRET_SYNC, registry.pk)
    except IntegrityError:  # made by a request racing this one
        raise ValidationError.for_field("name", _duplicate(values["name"])) from None
    return registry


def registry_update_check(data: dict) -> dict:
    """What ``registry_update`` checks of the fields it is given, at once."""
    given = [f for f in ("server", "username", "password") if f in data]
    return _check({k: v for k, v in data.items() if k != "name"}, given)


def registry_update(user, datacenter, name: str, data: dict) -> Registry:
    """Change the server, username or password (any of them). Jobs that name the credential
    pull with the new one from then on."""
    if not isinstance(data, dict):
        raise ValidationError("the registry must be a JSON object")
    if "name" in data and data["name"] != name:
        raise ValidationError.for_field("name", "cannot be changed: add new credentials and "
                                                "delete these")
    values = registry_update_check(data)
    with transaction.atomic():
        registry = Registry.objects.select_for_update().get(pk=registry_get(
            user, datacenter, name).pk)
        changed = []
        for field in ("server", "username"):
            if field in values and getattr(registry, field) != values[field].strip():
                setattr(registry, field, values[field].strip())
                changed.append(field)
        if "password" in values:
            registry.password_encrypted = crypto.encrypt(values["password"])
            changed.append("password")
        if changed:
            registry.save()
            audit_record(user, AuditEntry.Action.REGISTRY_UPDATE, f"{user.username}/{name}",
                         datacenter=datacenter, changed=changed)
            task_later(PULL_SECRET_SYNC, registry.pk)
    return registry


def registry_delete(user, datacenter, name: str, *, by=None) -> None:
    """Delete the credential and, on Kubernetes, its pull secret. Refused while a job that
    has not ended pulls with it (its pods may still need to pull). ``by`` is who deletes it
    when that is not its owner (an admin)."""
    registry = registry_get(user, datacenter, name)
    using = (registry.jobs.exclude(state__in=FINAL_JOB_STATES)
             .values_list("name", flat=True).first())
    if using is not None:
        raise ConflictError.for_field(
            "registry", f"job {using!r} pulls its image with {name!r} and has not ended: "
                        f"kill it first (paddlectl kill {using})", code="registry_in_use")
    owner_id, datacenter_id = registry.owner_id, registry.datacenter_id
    with transaction.atomic():
        registry.delete()
        audit_record(by or user, AuditEntry.Action.REGISTRY_DELETE, f"{user.username}/{name}",
                     datacenter=datacenter, whose=user)
        task_later(PULL_SECRET_REMOVE, datacenter_id, owner_id, name)


def registry_rotate_keys() -> int:
    """Encrypt every stored password again with the first (newest) key. Returns how many."""
    return crypto.rows_rotate(Registry, "password_encrypted")

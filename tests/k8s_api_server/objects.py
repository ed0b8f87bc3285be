"""Small helpers over object dicts shared by the API and the controllers."""

from __future__ import annotations

import datetime
import secrets
import uuid

# The alphabet the server's name generator draws from (no vowels, no look-alikes).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_iso() -> str:
    return iso_in(0)


def iso_in(seconds: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def seconds_since(text: str) -> float:
    return (datetime.datetime.now(datetime.UTC) - parse_time(text)).total_seconds()


def new_uid() -> str:
    return str(uuid.uuid4())


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(length))


def owner_reference(rt, owner: dict, *, controller: bool = True) -> dict:
    return {"apiVersion": rt.api_version, "kind": rt.kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": controller,
            "blockOwnerDeletion": True}


def controller_uid(obj: dict) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref["uid"]
    return None


def set_condition(conditions: list[dict], type_: str, status: str, *, reason: str | None = None,
                  message: str | None = None) -> None:
    """Add or update a condition; lastTransitionTime changes only when the status does."""
    entry = next((c for c in conditions if c["type"] == type_), None)
    if entry is None:
        entry = {"type": type_}
        conditions.append(entry)
    if entry.get("status") != status:
        entry["lastTransitionTime"] = now_iso()
    entry["status"] = status
    for key, value in (("reason", reason), ("message", message)):
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value


def condition_true(obj: dict, type_: str) -> bool:
    return any(c["type"] == type_ and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])

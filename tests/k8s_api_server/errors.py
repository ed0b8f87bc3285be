"""API errors as the real API server reports them: a ``Status`` body whose ``reason``,
``code`` and ``message`` wording clients (and their error handling) depend on."""

from __future__ import annotations


class ApiError(Exception):
    """Raised anywhere in request handling; the HTTP layer turns it into a Status body."""

    def __init__(self, code: int, reason: str, message: str, *, details: dict | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def _details(rt, name: str, *, kind: str | None = None, causes: list | None = None) -> dict:
    details = {"name": name, "kind": kind or rt.plural}
    if rt.group:
        details["group"] = rt.group
    if causes:
        details["causes"] = causes
    return details


def not_found(rt, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found',
                    details=_details(rt, name))


def already_exists(rt, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.qualified} "{name}" already exists',
                    details=_details(rt, name))


def conflict(rt, name: str, why: str = "the object has been modified; please apply your "
             "changes to the latest version and try again") -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.qualified} "{name}": '
                    f"{why}", details=_details(rt, name))


def forbidden(rt, name: str, why: str, causes: list | None = None) -> ApiError:
    return ApiError(403, "Forbidden", f'{rt.qualified} "{name}" is forbidden: {why}',
                    details=_details(rt, name, causes=causes))


def invalid(rt, name: str, causes: list[dict]) -> ApiError:
    """422 with one cause per field, worded ``<field>: <message>`` as the server does."""
    texts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {joined}',
                    details=_details(rt, name, kind=rt.kind, causes=causes))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def method_not_allowed(verb: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the "
                    f"requested resource ({verb})")


def cause(field: str, reason: str, message: str) -> dict:
    """One ``details.causes`` entry; ``reason`` is FieldValueRequired, FieldValueInvalid, …"""
    return {"reason": reason, "message": message, "field": field}


def required(field: str, detail: str = "") -> dict:
    return cause(field, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def invalid_value(field: str, value, detail: str) -> dict:
    return cause(field, "FieldValueInvalid", f"Invalid value: {go_repr(value)}: {detail}")


def unsupported_value(field: str, value, supported: list[str]) -> dict:
    choices = ", ".join(f'"{s}"' for s in supported)
    return cause(field, "FieldValueNotSupported",
                 f"Unsupported value: {go_repr(value)}: supported values: {choices}")


def forbidden_field(field: str, detail: str) -> dict:
    return cause(field, "FieldValueForbidden", f"Forbidden: {detail}")


def duplicate(field: str, value) -> dict:
    return cause(field, "FieldValueDuplicate", f"Duplicate value: {go_repr(value)}")


def go_repr(value) -> str:
    """Values inside messages are printed like Go's %q / %v: strings quoted, numbers bare."""
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        inner = ", ".join(f"{go_repr(k)}:{go_repr(v)}" for k, v in sorted(value.items()))
        return "map[string]string{" + inner + "}"
    return str(value)

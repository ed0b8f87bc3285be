"""The byte-carrying PFS endpoints in the OpenAPI schema.

They are answered by ``pfs.transfer`` before Django, so drf-spectacular cannot see them; this
postprocessing hook describes them beside the rest of the PFS API.
"""

from __future__ import annotations

from kernel.api import FLAG_RULE

ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
ENTRY = {"application/json": {"schema": {"$ref": "#/components/schemas/Entry"}}}
BINARY = {"schema": {"type": "string", "format": "binary"}}
PATH = {"name": "path", "in": "query", "required": True, "schema": {"type": "string"},
        "description": "/pfs/{datacenter}/home/{user}/… or /pfs/{datacenter}/public/…"}


def _errors(*codes: int) -> dict:
    return {str(code): {"description": "error", "content": ERROR} for code in codes}


def _flag(name: str, description: str) -> dict:
    return {"name": name, "in": "query", "schema": {"type": "boolean"},
            "description": f"{description}; {FLAG_RULE}"}


def _header(name: str, description: str, *, required: bool = True, kind="string") -> dict:
    return {"name": name, "in": "header", "required": required, "schema": {"type": kind},
            "description": description}


def _operation(operation_id: str, summary: str, **fields) -> dict:
    return {"operationId": operation_id, "summary": summary, "tags": ["v1"],
            "security": [{"apiToken": []}, {"cookieAuth": []}], **fields}


DOWNLOAD = dict(
    parameters=[PATH, _header("Range", "one byte range, e.g. bytes=0-1023", required=False)],
    responses={
        "200": {"description": "the file; a directory as an application/x-tar stream",
                "content": {"application/octet-stream": BINARY, "application/x-tar": BINARY}},
        "206": {"description": "the byte range asked for",
                "content": {"application/octet-stream": BINARY}},
        **_errors(400, 401, 403, 404, 416),
    },
)

CONTENT = {
    "get": _operation("v1_pfs_content_retrieve", "Download a file (Range supported) or a "
                      "directory as a tar stream", **DOWNLOAD),
    "head": _operation("v1_pfs_content_head", "A download's headers only", **DOWNLOAD),
    "put": _operation(
        "v1_pfs_content_update",
        "Upload a whole file, or a directory as a tar (Content-Type: application/x-tar), "
        "moved into place only complete and checked",
        parameters=[
            PATH,
            _flag("overwrite", "replace an existing file (default true)"),
            _flag("parents", "create missing parent directories"),
            _header("X-Checksum-Sha256", "SHA-256 of the body, 64 hex digits (or "
                    "X-Checksum-Xxh3-128)", required=False),
            _header("X-Checksum-Xxh3-128", "XXH3-128 of the body, 32 hex digits: instead of "
                    "X-Checksum-Sha256, much faster to compute", required=False),
        ],
        requestBody={"required": True, "content": {"application/octet-stream": BINARY,
                                                   "application/x-tar": BINARY}},
        responses={"201": {"description": "the file stored (for a tar: path, files, bytes)",
                            "content": ENTRY},
                   **_errors(400, 401, 403, 404, 409, 411, 413, 422)},
    ),
}

PATCH = _operation(
    "v1_pfs_uploads_partial_update",
    "Send the next bytes of a resumable upload; the last ones complete it",
    parameters=[
        {"name": "upload_id", "in": "path", "required": True,
         "schema": {"type": "string", "format": "uuid"}},
        _header("Upload-Offset", "where these bytes start: the offset the server has",
                kind="integer"),
        _header("X-Checksum-Sha256", "with the last chunk: the SHA-256 of the whole upload, "
                "if it was not declared when the upload started", required=False),
        _header("X-Checksum-Xxh3-128", "the same, for an upload started with algorithm "
                "xxh3-128", required=False),
    ],
    requestBody={"required": True, "content": {"application/octet-stream": BINARY}},
    responses={
        "200": {"description": "bytes received so far (`id`, `offset`)"},
        "201": {"description": "complete: `offset`, `complete`, and the `entry` stored"},
        **_errors(400, 401, 404, 409, 422),
    },
)


def transfer_paths(result, generator, request, public):
    paths = result.setdefault("paths", {})
    paths["/api/v1/pfs/content"] = CONTENT
    paths.setdefault("/api/v1/pfs/uploads/{upload_id}", {})["patch"] = PATCH
    return result

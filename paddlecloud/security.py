"""HTTP hardening that Django does not do by itself.

- ``BodyLimitMiddleware``: a request body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused (413)
  before anything reads it, where Django would answer 400 and log an error.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.deprecation import MiddlewareMixin

from .errors import request_too_large


class BodyLimitMiddleware(MiddlewareMixin):
    """413 for a body over DATA_UPLOAD_MAX_MEMORY_SIZE, in the API's error shape under /api/
    and as a page elsewhere. Every body counts, files in a multipart form too (Django's own
    limit leaves those out): no page of the portal takes files in a form, uploads go to the
    PFS byte streams, which are answered before Django."""

    def process_request(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        length = request.META.get("CONTENT_LENGTH") or ""
        if limit is not None and length.isascii() and length.isdigit() and int(length) > limit:
            return request_too_large(request)
        return None

"""What the apps' API views build on: ``validated`` for a request's body, ``query_flag``,
``query_whole`` and ``query_time`` for its query parameters (DRF's requests and Django's
alike), ``flag_parameter`` for the schema, ``CsvExport`` for exports. (A view that acts in a
datacenter is ``accounts.api.DatacenterAPIView``.)"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

from drf_spectacular.utils import OpenApiParameter
from rest_framework.renderers import BaseRenderer, JSONRenderer

from .env import FALSE_WORDS, TRUE_WORDS
from .errors import ValidationError

FLAG_RULE = (f"a boolean: {', '.join(TRUE_WORDS[:-1])} or {TRUE_WORDS[-1]} for true; "
             f"{', '.join(FALSE_WORDS[:-1])} or {FALSE_WORDS[-1]} for false (any case)")


def validated(serializer_class, request) -> dict:
    """The request's body as ``serializer_class`` validates it; else the 400 that names each
    field and its rule."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def query_flag(request, name: str, default: bool = False) -> bool:
    """The boolean query parameter ``name``: ``default`` when absent; else one of
    ``TRUE_WORDS`` or ``FALSE_WORDS`` in any case; anything else (an empty value too) is a
    400 that names the parameter and the rule. For DRF's requests and Django's alike."""
    value = request.GET.get(name)
    if value is None:
        return default
    word = value.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValidationError.for_field(name, FLAG_RULE)


def query_whole(request, name: str, low: int, high: int, default: int | None
                ) -> int | None:
    """The whole-number query parameter ``name`` from ``low`` to ``high``: ``default`` when
    absent; anything else is a 400 that names the parameter and the rule."""
    value = request.GET.get(name)
    if value is None:
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise ValidationError.for_field(name, f"a whole number from {low} to {high}")
    return int(value)


def flag_parameter(name: str, description: str) -> OpenApiParameter:
    """A boolean query parameter read with ``query_flag``, for ``extend_schema``."""
    return OpenApiParameter(name, bool, description=f"{description}; {FLAG_RULE}")


def query_time(request, name: str) -> datetime | None:
    """The time query parameter ``name``: a date (``2026-11-01``, its midnight) or an ISO 8601
    time, UTC unless it names its zone; None when absent or empty (a form's field left
    blank); anything else is a 400 that names the
    parameter and the rule."""
    value = request.GET.get(name)
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace(" ", "T"))
    except ValueError:
        raise ValidationError.for_field(
            name, "a date (2026-11-01) or an ISO 8601 time (2026-11-01T09:30Z)") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def time_parameter(name: str, description: str) -> OpenApiParameter:
    """A time query parameter read with ``query_time``, for ``extend_schema``."""
    return OpenApiParameter(name, str, description=f"{description}: a date (2026-11-01) or an "
                                                   "ISO 8601 time, UTC unless it says")


# An export's ``?format=``, for ``extend_schema`` (``CsvRenderer``).
FORMAT_PARAMETER = OpenApiParameter("format", str, enum=["json", "csv"],
                                    description="csv: the rows as CSV (or Accept: text/csv)")


class CsvRenderer(BaseRenderer):
    """Rows (a list of flat objects) as CSV, a header line of their keys first (the view's
    ``csv_columns`` when it names them, so an empty export still has its header). ``?format=csv``
    or ``Accept: text/csv`` asks for it (``CsvExport``)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        rows = data if isinstance(data, list) else [data]
        view = (renderer_context or {}).get("view")
        columns = list(getattr(view, "csv_columns", None) or (rows[0] if rows else []))
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else
                             json.dumps(row[c]) if isinstance(row.get(c), dict | list)
                             else row[c] for c in columns])
        return out.getvalue().encode()


class CsvExport:
    """A view whose answer is JSON or, asked for, CSV (``CsvRenderer``, in ``csv_columns``);
    its errors are JSON either way, the one error shape (a client reads it for the message)."""

    renderer_classes = [JSONRenderer, CsvRenderer]
    csv_columns: tuple[str, ...] = ()

    def handle_exception(self, exc):
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)

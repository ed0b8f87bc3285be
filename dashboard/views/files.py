"""The files page: browse the PFS home and public directories, make folders, delete.

The listing, mkdir and delete work without JavaScript (GET and POST forms); uploads are sent
by ``static/js/files.js`` straight to the API's byte endpoints (``pfs.transfer``), and
downloads are links to them. Every check is the file service's (``pfs.services``).

Names are whatever jobs made them, so they are shown as they are, not as they would like to
look: control and formatting characters (a right-to-left override that makes ``exe.txt``
look like ``txt.exe``, a newline, a zero-width space) as visible escapes, each name isolated
from the text around it (``<bdi>``), a long one cut short with the whole of it on hover; and
a folder of many entries is shown a page at a time.
"""

from __future__ import annotations

import itertools
import unicodedata
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_http_methods

from kernel.errors import PaddleCloudError
from paddlecloud_core.quantity import format_bytes, format_bytes_about
from pfs import services

from ..confirm import confirm_page, confirmed
from ..context import dashboard_datacenter
from ..forms_files import MkdirForm
from ..meters import meter
from ..service_errors import form_error_add

CONTENT_URL = "/api/v1/pfs/content"
# Files up to this size go up in one PUT (as paddlectl sends them), larger ones in chunks.
SINGLE_UPLOAD_MAX = 8 << 20
TEMPLATE = "dashboard/files.html"
# Rows of a folder on one page: a home of 50 000 files is 250 pages, not 80 MB of HTML.
PAGE_SIZE = 200
# Characters shown as escapes: controls, formatting (bidi overrides and isolates, zero-width
# characters), line and paragraph separators.
HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in HIDDEN


def _escape(char: str) -> str:
    code = ord(char)
    return (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
            else f"\\U{code:08x}")


def name_text(name: str) -> str:
    """A name as plain text, its hidden characters as escapes (``\\u202e``): for titles,
    labels and confirmations."""
    return "".join(_escape(char) if _hidden(char) else char for char in name)


def name_html(name: str) -> SafeString:
    """A name as HTML, its hidden characters as escapes marked out (``.ctrl``)."""
    parts = []
    for hidden, chars in itertools.groupby(name, key=_hidden):
        text = "".join(chars)
        parts.append(format_html('<span class="ctrl">{}</span>', name_text(text)) if hidden
                     else escape(text))
    return mark_safe("".join(parts))  # noqa: S308 - every part escaped above


def files_url(path: str) -> str:
    return f"{reverse('dashboard:files')}?{urlencode({'path': path})}"


def content_url(path: str, datacenter) -> str:
    return f"{CONTENT_URL}?{urlencode({'path': path, 'datacenter': datacenter.name})}"


def _home(request, datacenter) -> str:
    return f"/pfs/{datacenter.name}/home/{request.user.username}"


def _areas(request, datacenter) -> dict:
    """The two tabs: the user's home and the datacenter's public directory."""
    home, public = _home(request, datacenter), f"/pfs/{datacenter.name}/public"
    return {"home": home, "home_url": files_url(home), "public_url": files_url(public)}


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def file_browse(request):
    datacenter = dashboard_datacenter(request)
    if datacenter is None:
        return render(request, TEMPLATE, {"no_datacenter": True})
    if request.method == "POST":
        return _post(request, datacenter)
    return _page(request, datacenter, request.GET.get("path") or _home(request, datacenter),
                 MkdirForm())


def _page(request, datacenter, path: str, mkdir_form: MkdirForm):
    """The listing of ``path``; the page with the file service's refusal (its status) when
    the path is not one the user may see."""
    try:
        target, entry, entries = services.pfs_list(request.user, datacenter, path)
    except PaddleCloudError as exc:
        return render(request, TEMPLATE, {"error": exc, **_areas(request, datacenter)},
                      status=exc.status)
    if entries and entries[0] is entry:  # a file (or a link to one): download it
        return redirect(content_url(str(target.path), datacenter))
    here = str(target.path)
    writable = not target.path.public
    # Folders first, then files, each by name; only the page asked for is made into rows.
    ordered = sorted(entries, key=lambda e: (e.type != "dir", e.name))
    page = Paginator(ordered, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "path": here,
        "path_html": name_html(here),
        "public": target.path.public,
        "writable": writable,
        "crumbs": _crumbs(target.path),
        "entries": _rows(page, datacenter, here),
        "page": page,
        "prev_url": _page_url(here, page.previous_page_number()) if page.has_previous() else "",
        "next_url": _page_url(here, page.next_page_number()) if page.has_next() else "",
        **_areas(request, datacenter),
        "mkdir_form": mkdir_form,
        "single_max": min(SINGLE_UPLOAD_MAX, settings.PADDLECLOUD_PFS_CHUNK_SIZE),
    }
    if writable:
        context["storage"] = _storage(request.user, datacenter)
    return render(request, TEMPLATE, context)


def _page_url(here: str, number: int) -> str:
    return f"{files_url(here)}&page={number}"


def _crumbs(path) -> list[dict]:
    """The way from the area's root (home or public) down to ``path``."""
    crumbs = [{"name": "public" if path.public else f"home/{path.user}",
               "url": files_url(path.area_label)}]
    for index, part in enumerate(path.parts, 1):
        crumbs.append({"name": name_html(part),
                       "url": files_url("/".join([path.area_label, *path.parts[:index]]))})
    return crumbs


def _rows(entries, datacenter, here: str) -> list[dict]:
    """A row for each entry: its name (the real one, for the forms) as text and as HTML."""
    rows = []
    for entry in entries:
        path = f"{here}/{entry.name}"
        target = entry.target or ""
        rows.append({
            "name": entry.name, "type": entry.type, "target": entry.target,
            "path_text": name_text(path),
            "text": name_text(entry.name), "html": name_html(entry.name),
            "target_text": name_text(target), "target_html": name_html(target),
            "size": format_bytes_about(entry.size),
            "mtime": datetime.fromtimestamp(entry.mtime, UTC),
            "browse_url": files_url(path) if entry.type in ("dir", "link") else None,
            "download_url": content_url(path, datacenter),
        })
    return rows


def _storage(user, datacenter) -> dict:
    """The home's usage; the bar also shows what uploads in progress have reserved."""
    usage = services.usage_report(user, datacenter)
    return {"used": format_bytes_about(usage.used), "limit": format_bytes(usage.limit),
            "unknown": usage.unknown,
            "reserved": format_bytes_about(usage.reserved) if usage.reserved else "",
            **meter(usage.used + usage.reserved, usage.limit)}


# -- changes ----------------------------------------------------------------------------------


def _post(request, datacenter):
    here = request.POST.get("path") or _home(request, datacenter)
    action = request.POST.get("action")
    if action == "mkdir":
        form = MkdirForm(request.POST)
        if _mkdir(request, datacenter, here, form):
            return redirect(files_url(here))
        return _page(request, datacenter, here, form)
    if action == "delete":
        return _delete(request, datacenter, here, request.POST.get("name", ""))
    messages.error(request, "unknown action: nothing was changed")
    return redirect(files_url(here))


def _mkdir(request, datacenter, here: str, form: MkdirForm) -> bool:
    if not form.is_valid():
        return False
    name = form.cleaned_data["name"]
    try:
        services.pfs_mkdir(request.user, datacenter, f"{here}/{name}")
    except PaddleCloudError as exc:
        form_error_add(form, exc, rename={"path": "name"})
        return False
    messages.success(request, f"Created folder {name}.")
    return True


def _delete(request, datacenter, here: str, name: str):
    if not name or "/" in name:
        messages.error(request, "name: which file or folder to delete is missing")
        return redirect(files_url(here))
    path = f"{here}/{name}"
    if not confirmed(request):
        return confirm_page(
            request, title=f"Delete {name_text(name)}?",
            message=f"{name_text(path)} (and everything in it, if it is a folder) will be deleted. "
                    "This cannot be undone.",
            button="Delete", cancel_url=files_url(here))
    try:
        _target, freed = services.pfs_remove(request.user, datacenter, path, recursive=True)
    except PaddleCloudError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Deleted {name_text(name)}"
                                  + (f" ({format_bytes_about(freed)} freed)." if freed else "."))
    return redirect(files_url(here))

"""The files page: browse the PFS home and public directories, make folders, delete.

The listing, mkdir and delete work without JavaScript (GET and POST forms); uploads are sent
by ``static/js/files.js`` straight to the API's byte endpoints (``pfs.transfer``), and
downloads are links to them. Every check is the file service's (``pfs.services``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from paddlecloud.errors import PaddleCloudError
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
    context = {
        "path": here,
        "public": target.path.public,
        "writable": writable,
        "crumbs": _crumbs(target.path),
        "entries": _rows(entries, datacenter, here),
        **_areas(request, datacenter),
        "mkdir_form": mkdir_form,
        "single_max": min(SINGLE_UPLOAD_MAX, settings.PADDLECLOUD_PFS_CHUNK_SIZE),
    }
    if writable:
        context["storage"] = _storage(request.user, datacenter)
    return render(request, TEMPLATE, context)


def _crumbs(path) -> list[dict]:
    """The way from the area's root (home or public) down to ``path``."""
    crumbs = [{"name": "public" if path.public else f"home/{path.user}",
               "url": files_url(path.area_label)}]
    for index, part in enumerate(path.parts, 1):
        crumbs.append({"name": part,
                       "url": files_url("/".join([path.area_label, *path.parts[:index]]))})
    return crumbs


def _rows(entries, datacenter, here: str) -> list[dict]:
    """Folders first, then files, each by name."""
    rows = []
    for entry in sorted(entries, key=lambda e: (e.type != "dir", e.name)):
        path = f"{here}/{entry.name}"
        rows.append({
            "name": entry.name, "type": entry.type, "path": path, "target": entry.target,
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
            request, title=f"Delete {name}?",
            message=f"{path} (and everything in it, if it is a folder) will be deleted. "
                    "This cannot be undone.",
            button="Delete", cancel_url=files_url(here))
    try:
        _target, freed = services.pfs_remove(request.user, datacenter, path, recursive=True)
    except PaddleCloudError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Deleted {name}"
                                  + (f" ({format_bytes_about(freed)} freed)." if freed else "."))
    return redirect(files_url(here))

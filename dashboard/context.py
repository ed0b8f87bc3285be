"""The datacenter the dashboard acts in, kept in the session and offered to every template."""

from __future__ import annotations

from accounts.models import Datacenter

SESSION_KEY = "datacenter"


def dashboard_datacenters(request) -> list[Datacenter]:
    return [m.datacenter for m in
            request.user.memberships.select_related("datacenter").order_by("datacenter__name")]


def dashboard_datacenter(request, datacenters: list[Datacenter] | None = None
                         ) -> Datacenter | None:
    """The one chosen in the header (kept in the session), else the user's first; None when the
    user is a member of none."""
    if datacenters is None:
        datacenters = dashboard_datacenters(request)
    chosen = request.session.get(SESSION_KEY)
    for datacenter in datacenters:
        if datacenter.name == chosen:
            return datacenter
    return datacenters[0] if datacenters else None


def dashboard(request) -> dict:
    """Context processor: ``datacenter`` (current) and ``datacenters`` (all of the user's)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    memberships = list(request.user.memberships.select_related("datacenter")
                       .order_by("datacenter__name"))
    datacenters = [m.datacenter for m in memberships]
    current = dashboard_datacenter(request, datacenters)
    # Whether the user is in a group in the current datacenter (the header links its page).
    in_group = any(m.team_id is not None for m in memberships
                   if current is not None and m.datacenter_id == current.pk)
    return {"datacenter": current, "datacenters": datacenters, "in_group": in_group}

"""Add-ons a test installs into the fake cluster, as an admin installs them into a real one
(``FakeKubernetes.install("kueue", "volcano")``, or ``Settings.addons`` at start): their
CRDs served (crds/), their admission webhooks called on every write and their controllers
run in the control-plane loop (kueue.py, kueue_scheduler.py, volcano.py). With
``controllers=False`` only the CRDs are served: objects are stored and validated, nothing
acts on them."""

from __future__ import annotations

from . import crds
from .kueue import Kueue
from .volcano import Volcano

ADDONS = tuple(crds.ADDONS)  # "kueue", "volcano"


def install(server, name: str, *, controllers: bool = True):
    """Serve add-on ``name`` on the running (or not yet started) ``server``; returns its
    controller object (``Kueue`` or ``Volcano``), None without controllers. Installing
    twice is a no-op."""
    api = server.api
    with api.store.lock:
        if name in server.addons:
            return server.addons[name]
        api.types = api.types + crds.types(name)
        addon = None
        if controllers and name == "kueue":
            addon = Kueue(api)
            api.types = api.types + addon.scheduler.visibility
        elif controllers and name == "volcano":
            addon = Volcano(api, server.controller.kubelet)
            addon.install()
        if addon is not None:
            api.webhooks.append(addon)
            server.controller.add_loop(addon.sync)
        server.addons[name] = addon
        return addon

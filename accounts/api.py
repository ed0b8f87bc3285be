"""What every app's API views that act in one datacenter build on: ``DatacenterAPIView``."""

from __future__ import annotations

from rest_framework.views import APIView

from .models import Datacenter
from .selectors import request_datacenter


class DatacenterAPIView(APIView):
    """An API view that acts in one datacenter: ``self.datacenter``, resolved once a request
    by ``accounts.selectors.request_datacenter`` (the token's datacenter, else the one the
    request names, checked against the user's memberships).

    It is resolved after authentication and the permission checks, before the handler: a
    request without credentials is still a 401, and a user who is not a member gets the 403
    that names the datacenter before anything else is looked at.
    """

    datacenter: Datacenter

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.datacenter = request_datacenter(request)

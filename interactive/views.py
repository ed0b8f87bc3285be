"""The interactive API: a browser route to a port of a running job."""

from rest_framework.response import Response
from rest_framework.views import APIView


class PortOpenView(APIView):
    """POST: a route to the port (``interactive.services.route_open``); answers its enter URL."""

    def post(self, request, name: str, port: int):
        return Response({"detail": "Not found."}, status=404)

"""The OpenAPI schema and the API docs, served without internet access."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_schema_is_openapi_3_and_lists_the_api(api):
    response = api.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    for path in ("/api/v1/version/", "/api/v1/me/", "/api/v1/auth/token/",
                 "/api/v1/auth/tokens/", "/api/v1/auth/tokens/{token_id}/",
                 "/api/v1/pfs/files", "/api/v1/pfs/uploads"):
        assert path in schema["paths"], path
    # The byte streams, served before Django, are documented too.
    assert set(schema["paths"]["/api/v1/pfs/content"]) == {"get", "head", "put"}
    assert set(schema["paths"]["/api/v1/pfs/uploads/{upload_id}"]) == {"get", "delete", "patch"}
    assert schema["components"]["securitySchemes"]["apiToken"]["scheme"] == "bearer"
    error = schema["components"]["schemas"]["Error"]
    assert set(error["properties"]) == {"code", "message", "fields"}


def test_schema_generates_without_warnings():
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "openapi:" in out.getvalue()


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_docs_load_their_assets_from_this_server(client, page):
    response = client.get(page)
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert assets, html
    for asset in assets:
        assert asset.startswith("/static/"), f"{asset} is not served by the portal"
        assert client.get(asset).status_code == 200, asset

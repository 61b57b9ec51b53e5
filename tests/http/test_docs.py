"""Interactive API docs at /docs: served from the installed swagger-ui-py package, same origin only,
public like /openapi.json even when tokens are configured."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from echomq_http.api.docs import IMMUTABLE
from echomq_http.config import Settings
from tests.support.service import running_service

ASSET_URL = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
CONTENT_TYPES = {
    ".css": "text/css",
    ".js": "text/javascript",
    ".png": "image/png",
}


@pytest.fixture(scope="module")
def auth_url(redis_url: str) -> Iterator[str]:
    with running_service(Settings(redis_url=redis_url, auth_entries=("admin:docs-admin-token",))) as url:
        yield url


@pytest.fixture
async def anonymous(auth_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=auth_url, timeout=30) as http:
        yield http


async def test_the_page_loads_only_same_origin_assets_all_served(anonymous: httpx.AsyncClient) -> None:
    page = await anonymous.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-cache"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http://" not in page.text and "https://" not in page.text
    urls = ASSET_URL.findall(page.text)
    assert {url.rsplit("/", 1)[1] for url in urls} >= {"swagger-ui.css", "swagger-ui-bundle.js", "init.js"}
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url  # a path on this origin
        asset = await anonymous.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["content-type"].startswith(CONTENT_TYPES[url[url.rindex(".") :]]), url
        assert asset.headers["cache-control"] == IMMUTABLE
        assert asset.content


async def test_the_page_points_at_the_served_document(anonymous: httpx.AsyncClient) -> None:
    page = (await anonymous.get("/docs")).text
    (init,) = [url for url in ASSET_URL.findall(page) if url.endswith("/init.js")]
    script = (await anonymous.get(init)).text
    assert 'url: "/openapi.json"' in script
    assert "validatorUrl: null" in script  # else Swagger UI asks an outside server to check the document
    assert (await anonymous.get("/openapi.json")).status_code == 200  # public too


async def test_only_the_current_assets_are_served(anonymous: httpx.AsyncClient) -> None:
    page = (await anonymous.get("/docs")).text
    (css,) = [url for url in ASSET_URL.findall(page) if url.endswith("/swagger-ui.css")]
    base = css.rsplit("/", 1)[0]
    for url in (
        "/docs/0000000000000000/swagger-ui.css",  # another digest: another version's URL
        base + "/index.html",  # in the package, but not served
        base + "/..%2F__init__.py",
        "/docs/swagger-ui.css",
    ):
        response = await anonymous.get(url)
        assert response.status_code == 404, url
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_the_api_still_needs_a_token(anonymous: httpx.AsyncClient) -> None:
    refused = await anonymous.get("/v1/queues")
    assert refused.status_code == 401

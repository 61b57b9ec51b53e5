"""Interactive API docs at /docs: Swagger UI on /openapi.json, from the files the swagger-ui-py
package installs. Nothing comes from a CDN and nothing third-party is in this repository.

The page and its assets are public, as /openapi.json is. Asset URLs carry a digest of their
contents, so they are cached for good and a new package version gets new URLs; the page itself
is revalidated. Its Content-Security-Policy lets the browser load nothing from another origin.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from litestar import Request, Response, get
from litestar.exceptions import NotFoundException

DOCS = "/docs"
PACKAGE = "swagger_ui"  # the import name of the swagger-ui-py distribution
# file -> content type: the only files served, so no path from a request reaches the disk.
PACKAGE_FILES = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}
INIT = "init.js"
JS = "text/javascript"  # litestar adds "; charset=utf-8" to text types
# Swagger UI's options: our document only, and no validator badge (it would ask an outside
# server to check the document).
INIT_SCRIPT = b"""window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  displayRequestDuration: true,
  docExpansion: "list",
  defaultModelsExpandDepth: 0,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
"""
IMMUTABLE = "public, max-age=31536000, immutable"
# Swagger UI sets inline styles and renders data: images; everything else comes from here.
CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'self'"
)
_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>EchoMQ HTTP API</title>
<link rel="stylesheet" href="{base}/swagger-ui.css">
<link rel="icon" type="image/png" href="{base}/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{base}/swagger-ui-bundle.js"></script>
<script src="{base}/init.js"></script>
</body>
</html>
"""


class DocsUnavailable(Exception):
    """The swagger-ui-py package, or a file of it, is not installed."""


@dataclass(frozen=True, slots=True)
class Assets:
    digest: str  # of every file served: a part of their URLs
    files: dict[str, tuple[bytes, str]]  # name -> (content, content type)
    page: bytes


def package_dir() -> Path:
    """Where the package's files are, found without importing it (its __init__ pulls in jinja2)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DocsUnavailable(f"the {PACKAGE} package (swagger-ui-py) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


@functools.cache
def assets() -> Assets:
    """Read once per process, on the first request for the docs (1.6 MB, not on every start)."""
    static = package_dir()
    files: dict[str, tuple[bytes, str]] = {}
    for name, content_type in PACKAGE_FILES.items():
        try:
            files[name] = ((static / name).read_bytes(), content_type)
        except OSError as error:
            raise DocsUnavailable(f"swagger-ui-py has no {name}: {error}") from None
    files[INIT] = (INIT_SCRIPT, JS)
    hashed = hashlib.sha256()
    for name in sorted(files):
        hashed.update(name.encode() + b"\0" + files[name][0])
    digest = hashed.hexdigest()[:16]
    page = _PAGE.format(base=f"{DOCS}/{digest}").encode()
    return Assets(digest, files, page)


def _assets() -> Assets:
    try:
        return assets()
    except DocsUnavailable as error:
        raise NotFoundException(f"the API docs are not available: {error}") from None


@get(DOCS, include_in_schema=False)
async def docs_page() -> Response[bytes]:
    return Response(
        _assets().page,
        media_type="text/html",
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
        },
    )


@get(DOCS + "/{digest:str}/{name:str}", include_in_schema=False)
async def docs_asset(request: Request[Any, Any, Any]) -> Response[bytes]:
    digest, name = request.path_params["digest"], request.path_params["name"]
    served = _assets()
    if digest != served.digest or name not in served.files:
        raise NotFoundException(f"no docs asset {digest}/{name}")
    content, content_type = served.files[name]
    return Response(
        content,
        media_type=content_type,
        headers={"Cache-Control": IMMUTABLE, "X-Content-Type-Options": "nosniff"},
    )


DOCS_HANDLERS: list[Any] = [docs_page, docs_asset]

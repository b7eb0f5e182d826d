"""The API's interactive docs (/docs: Swagger UI, /redoc: ReDoc) with every asset served here.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so on a cluster without internet
access /docs is a blank page. The assets come from the `fastapi-offline` package (MIT; it ships
Swagger UI's bundle and CSS and ReDoc's standalone script); the pages are ours so that Swagger
UI starts from a script file (`static/swagger-init.js`), not an inline `<script>`: /docs then
runs under the same `script-src 'self'` as every other page (see `security.CSP`).
"""

from __future__ import annotations

from html import escape
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

ASSET_PREFIX = "/static/apidocs"
_OURS = Path(__file__).parent / "static"
_VENDORED = Path(str(files("fastapi_offline") / "static"))
# The only files served under ASSET_PREFIX: a fixed map, never a path from the request.
ASSETS = {
    "swagger-ui-bundle.js": _VENDORED / "swagger-ui-bundle.js",
    "swagger-ui.css": _VENDORED / "swagger-ui.css",
    "redoc.standalone.js": _VENDORED / "redoc.standalone.js",
    "favicon.png": _VENDORED / "favicon.png",
    "swagger-init.js": _OURS / "swagger-init.js",
}
# The assets change only with the installed package: browsers may keep them a day.
CACHE = {"Cache-Control": "public, max-age=86400"}

router = APIRouter(include_in_schema=False)


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    root, spec = _root(request), _spec_url(request)
    return _page(
        request,
        head=f'<link rel="stylesheet" href="{root}{ASSET_PREFIX}/swagger-ui.css">\n',
        body=f"""<div id="swagger-ui" data-openapi-url="{spec}"></div>
<script src="{root}{ASSET_PREFIX}/swagger-ui-bundle.js"></script>
<script src="{root}{ASSET_PREFIX}/swagger-init.js"></script>
""",
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    root, spec = _root(request), _spec_url(request)
    return _page(
        request,
        head="",
        body=f"""<redoc spec-url="{spec}"></redoc>
<script src="{root}{ASSET_PREFIX}/redoc.standalone.js"></script>
""",
    )


def _page(request: Request, *, head: str, body: str) -> HTMLResponse:
    """The HTML shell both documentation pages share: title, icon, their own head and body."""
    root = _root(request)
    return HTMLResponse(
        f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{escape(request.app.title)} API</title>
{head}<link rel="icon" href="{root}{ASSET_PREFIX}/favicon.png">
</head>
<body>
{body}</body>
</html>
"""
    )


def _spec_url(request: Request) -> str:
    return _root(request) + escape(request.app.openapi_url or "")


@router.get(ASSET_PREFIX + "/{name}")
def asset(name: str) -> FileResponse:
    path = ASSETS.get(name)
    if path is None:
        raise HTTPException(404, f"no docs asset {name!r}")
    return FileResponse(path, headers=CACHE)


def _root(request: Request) -> str:
    # A path, never a URL built from the Host header (see autotuner.dashboard._url_path).
    return escape(str(request.scope.get("root_path", "")))

"""The dashboard at /ui: server-rendered pages over the same queue operations as the API.

Modules: ``access`` (who is looking: the sign-in cookie, what a token may do), ``csrf``,
``render`` (templates, filters, error pages), ``pages`` (GET), ``actions`` (POST), ``live`` (the
event feeds the pages follow), ``overview``, ``timeline``, ``forms``; ``templates/`` and
``static/`` (our own CSS and one small script).
"""

from __future__ import annotations

from litestar import Router
from litestar.datastructures import CacheControlHeader
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

from echomq_http.ui.actions import ACTION_HANDLERS
from echomq_http.ui.live import LIVE_HANDLERS
from echomq_http.ui.pages import PAGE_HANDLERS
from echomq_http.ui.render import ERROR_PAGES, STATIC, template_config

STATIC_MAX_AGE_S = 300

__all__ = ["template_config", "ui_handlers"]


def ui_handlers() -> list[ControllerRouterHandler]:
    """The dashboard's routes (none in the OpenAPI document), its errors answered as HTML pages."""
    pages = Router(
        path="/",
        route_handlers=[*PAGE_HANDLERS, *ACTION_HANDLERS, *LIVE_HANDLERS],
        exception_handlers=ERROR_PAGES,
        include_in_schema=False,
    )
    static = create_static_files_router(
        path="/ui/static",
        directories=[STATIC],
        include_in_schema=False,
        cache_control=CacheControlHeader(max_age=STATIC_MAX_AGE_S),
        name="ui-static",
    )
    return [pages, static]

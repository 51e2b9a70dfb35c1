"""The dashboard's Starlette app: pages, the JSON the pages poll, and the actions (POST)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from easylaunch import __version__
from easylaunch.dashboard import searches, sweeps, views
from easylaunch.dashboard.security import TOKEN_HEADER, Guard
from easylaunch.errors import EasyLaunchError
from easylaunch.modes import all_modes
from easylaunch.settings import ConfigArg, load_settings
from easylaunch.tracking.registry import NoSuchRun, open_registry

HERE = Path(__file__).resolve().parent
POLL_SECONDS = 3  # how often pages ask for states and log lines
CHARTS_POLL_SECONDS = 5  # and for open runs' curves


class Pages:
    """The dashboard's handlers over one registry: pages, the JSON they poll, the actions."""

    def __init__(self, config: ConfigArg, token: str) -> None:
        self.config = config
        self.registry = open_registry(load_settings(config).REGISTRY_PATH)
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                 autoescape=True, undefined=jinja2.StrictUndefined)
        self.templates = Jinja2Templates(env=env)
        self.common = {"token": token, "token_header": TOKEN_HEADER, "version": __version__,
                       "poll_ms": POLL_SECONDS * 1000,
                       "charts_poll_ms": CHARTS_POLL_SECONDS * 1000}

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        return self.templates.TemplateResponse(request, name, {**self.common, **context},
                                               status_code=status)

    # -- pages ----------------------------------------------------------------------------------

    def runs(self, request: Request) -> Response:
        filters = views.Filters.of(request.query_params)
        groups: list[views.Group]
        reasons: list[tuple[str, int]]
        error, groups, total, page_no, reasons = None, [], 0, 1, []
        try:
            page_no = views.page_number(request.query_params.get("page"))
            groups, total = views.runs_page(self.registry, filters, page_no)
            reasons = views.reasons(self.registry, filters)
        except EasyLaunchError as exc:
            error = str(exc)
        pages = max(math.ceil(total / views.PER_PAGE), 1)

        def page_url(number: int) -> str:
            return "/?" + urlencode({**filters.params(), "page": number})

        def reason_url(reason: str) -> str:
            return "/?" + urlencode({**filters.params(), "reason": reason})

        return self.page(request, "runs.html", status=400 if error else 200, groups=groups,
                         shown=sum(len(g.rows) for g in groups), total=total, page_no=page_no,
                         pages=pages, page_url=page_url, reason_url=reason_url,
                         reasons=reasons, per_page=views.PER_PAGE, filters=filters,
                         error=error, modes=list(all_modes()), states=views.STATES,
                         experiments=self.registry.experiments())

    def run(self, request: Request) -> Response:
        return self.page(request, "run.html",
                         run=views.run_view(self.registry, request.path_params["id"]))

    def _sweep_id(self, request: Request) -> str:
        return self.registry.find_sweep(request.path_params["id"])

    def sweep(self, request: Request) -> Response:
        view = sweeps.sweep_view(self._sweep_id(request), self.config)
        metric = request.query_params.get("metric")
        return self.page(request, "sweep.html", sweep=view,
                         hparams=sweeps.hparams_view(self.registry, view.sweep, metric),
                         search=searches.search_view(self.registry, view.sweep))

    def search(self, request: Request) -> Response:
        """A search's trials alone (its sweep page asks for them again while it goes on)."""
        sweep = self._sweep_id(request)
        return self.page(request, "search.html", search=self._search(sweep))

    def _search(self, sweep: str) -> searches.SearchView:
        found = searches.search_view(self.registry, sweep)
        if found is None:
            raise EasyLaunchError(f"sweep {sweep} is no search")
        return found

    def hparams(self, request: Request) -> Response:
        return self.page(request, "hparams.html", hparams=sweeps.hparams_view(
            self.registry, self._sweep_id(request), request.query_params.get("metric")))

    def compare(self, request: Request) -> Response:
        ids = [i for i in request.query_params.get("runs", "").split(",") if i]
        shown = sweeps.chosen_runs(self.registry, ids, None) if ids else []
        rows = views.groups_of(self.registry, shown, time.time())
        return self.page(request, "compare.html", groups=rows,
                         ids=",".join(s.entry.id for s in shown))

    # -- what the pages poll, and the actions ---------------------------------------------------

    def states(self, request: Request) -> Response:
        ids = [i for i in request.query_params.get("ids", "").split(",") if i]
        return JSONResponse(views.live_states(self.registry, ids))

    def curves(self, request: Request) -> Response:
        params = request.query_params
        if params.get("search"):
            sweep = self.registry.find_sweep(params["search"])
            return JSONResponse(searches.objective_curves(self._search(sweep)))
        ids = [i for i in params.get("runs", "").split(",") if i]
        metrics = [m for m in params.get("metrics", "").split(",") if m] or None
        shown = sweeps.chosen_runs(self.registry, ids, params.get("sweep"))
        lo, hi = (_number(params, "lo"), _number(params, "hi"))
        return JSONResponse(sweeps.curves(shown, metrics, lo, hi))

    def log(self, request: Request) -> Response:
        try:
            offset = int(request.query_params.get("offset", -1))
        except ValueError:
            raise EasyLaunchError("offset: a whole number of bytes") from None
        chunk = views.log_chunk(self.registry, request.path_params["id"],
                                request.query_params.get("stream", "stdout"), offset)
        return JSONResponse(vars(chunk))

    def cancel(self, request: Request) -> Response:
        return JSONResponse({"state": views.cancel_run(self.registry,
                                                       request.path_params["id"])})

    def resubmit(self, request: Request) -> Response:
        new = views.resubmit_run(self.registry, request.path_params["id"], self.config)
        return JSONResponse({"id": new, "url": f"/run/{new}"})

    def failed(self, request: Request, exc: Exception) -> Response:
        """An error as the asker reads it: JSON for the API, a page for a person."""
        if isinstance(exc, HTTPException):
            status, message = exc.status_code, exc.detail
        elif isinstance(exc, EasyLaunchError):
            status, message = 404 if isinstance(exc, NoSuchRun) else 400, str(exc)
        else:  # (a bug: the server's output shows the traceback)
            status, message = 500, f"the dashboard failed: {type(exc).__name__}: {exc}"
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        return self.page(request, "error.html", status=status, message=message)


def create_app(config: ConfigArg, token: str, port: int,
               hosts: frozenset[str] | None) -> Guard:
    """The dashboard over the registry that ``config`` names, guarded by ``token`` (see
    :class:`~easylaunch.dashboard.security.Guard`). The Guard wraps the whole app, so its
    headers are on every answer, a crash's 500 included."""
    pages = Pages(config, token)
    routes = [
        Route("/", pages.runs),
        Route("/run/{id}", pages.run),
        Route("/sweep/{id}", pages.sweep),
        Route("/sweep/{id}/hparams", pages.hparams),
        Route("/sweep/{id}/search", pages.search),
        Route("/compare", pages.compare),
        Route("/api/states", pages.states),
        Route("/api/curves", pages.curves),
        Route("/api/runs/{id}/log", pages.log),
        Route("/api/runs/{id}/cancel", pages.cancel, methods=["POST"]),
        Route("/api/runs/{id}/resubmit", pages.resubmit, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={
        EasyLaunchError: pages.failed, HTTPException: pages.failed, Exception: pages.failed})
    return Guard(GZipMiddleware(app, minimum_size=2048, compresslevel=1), token=token, port=port,
                 hosts=hosts)


def _number(params: Mapping[str, str], name: str) -> float | None:
    """A query parameter that is a number, if given."""
    text = params.get(name)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise EasyLaunchError(f"{name} {text!r}: a number (a step)")
    return value

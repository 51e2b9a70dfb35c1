"""The dashboard's Starlette app: pages, the JSON the pages poll, and the actions (POST)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from easylaunch import __version__
from easylaunch.dashboard import views
from easylaunch.dashboard.security import TOKEN_HEADER, Guard
from easylaunch.errors import EasyLaunchError
from easylaunch.modes import MODES
from easylaunch.registry import NoSuchJob, open_registry
from easylaunch.results.plot import plot_sweep
from easylaunch.settings import ConfigArg, load_settings

HERE = Path(__file__).resolve().parent
POLL_SECONDS = 3  # how often pages ask for states and log lines
CHARTS_POLL_SECONDS = 5  # and for an open run's charts (its metric files are read whole)


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

    def page(self, request: Request, name: str, status: int = 200, **context) -> Response:
        return self.templates.TemplateResponse(request, name, {**self.common, **context},
                                               status_code=status)

    # -- pages ----------------------------------------------------------------------------------

    def runs(self, request: Request) -> Response:
        filters = views.Filters.of(request.query_params)
        error, rows, total, page_no = None, [], 0, 1
        try:
            page_no = views.page_number(request.query_params.get("page"))
            rows, total = views.runs_page(self.registry, filters, page_no)
        except EasyLaunchError as exc:
            error = str(exc)
        pages = max(math.ceil(total / views.PER_PAGE), 1)

        def page_url(number: int) -> str:
            return "/?" + urlencode({**filters.params(), "page": number})

        return self.page(request, "runs.html", status=400 if error else 200, rows=rows,
                         total=total, page_no=page_no, pages=pages, page_url=page_url,
                         per_page=views.PER_PAGE, filters=filters, error=error,
                         modes=list(MODES), states=views.STATES,
                         experiments=self.registry.experiments())

    def run(self, request: Request) -> Response:
        return self.page(request, "run.html",
                         run=views.run_view(self.registry, request.path_params["id"]))

    def charts(self, request: Request) -> Response:
        run_id = request.path_params["id"]
        found, still = views.run_charts(self.registry, run_id)
        return self.page(request, "charts.html", charts=found, open=still, run_id=run_id)

    def _sweep_id(self, request: Request) -> str:
        return self.registry.find_sweep(request.path_params["id"])

    def sweep(self, request: Request) -> Response:
        view = views.sweep_view(self._sweep_id(request), self.config)
        by = request.query_params.get("by")
        by = by if by in view.keys else (view.keys[0] if view.keys else None)
        plot_query = {metric: urlencode({"metric": metric, **({"by": by} if by else {})})
                      for metric in view.metrics}
        return self.page(request, "sweep.html", sweep=view, by=by, plot_query=plot_query)

    def plot(self, request: Request) -> Response:
        by = request.query_params.get("by") or None
        with tempfile.TemporaryDirectory() as folder:
            path = plot_sweep(self._sweep_id(request), request.query_params.get("metric", ""),
                              by=by, out=Path(folder) / "plot.png", config=self.config)
            return Response(path.read_bytes(), media_type="image/png")

    # -- what the pages poll, and the actions ---------------------------------------------------

    def states(self, request: Request) -> Response:
        ids = [i for i in request.query_params.get("ids", "").split(",") if i]
        return JSONResponse(views.live_states(self.registry, ids))

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
            status, message = 404 if isinstance(exc, NoSuchJob) else 400, str(exc)
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
        Route("/run/{id}/charts", pages.charts),
        Route("/sweep/{id}", pages.sweep),
        Route("/sweep/{id}/plot.png", pages.plot),
        Route("/api/states", pages.states),
        Route("/api/runs/{id}/log", pages.log),
        Route("/api/runs/{id}/cancel", pages.cancel, methods=["POST"]),
        Route("/api/runs/{id}/resubmit", pages.resubmit, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={
        EasyLaunchError: pages.failed, HTTPException: pages.failed, Exception: pages.failed})
    return Guard(app, token=token, port=port, hosts=hosts)

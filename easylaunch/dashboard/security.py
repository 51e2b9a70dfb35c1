"""Who may use the dashboard, and the headers every answer carries (ASGI middleware).

- Every request needs the dashboard's random token (kept private beside the registry, so a
  restart keeps open pages working; ``--new-token`` replaces it): on the URL ``easylaunch
  ui`` prints (``?token=``; answered by a redirect that keeps it as an HttpOnly,
  SameSite=Strict cookie for this port) or that cookie. Another user of a shared machine
  reaches 127.0.0.1 too.
- A request that changes something (POST) also needs the token in the ``X-EasyLaunch-Token``
  header (the pages hold it), and must come from the dashboard's own pages: an ``Origin``
  other than the server's own, or a ``Sec-Fetch-Site`` other than ``same-origin``, is refused.
- On a loopback address the ``Host`` header must name that address (DNS rebinding).
- Answers forbid inline and foreign scripts, framing and type sniffing.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_HEADER = "X-EasyLaunch-Token"
TOKEN_PARAM = "token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = [(k.encode(), v.encode()) for k, v in (
    ("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"), ("Cache-Control", "no-store"))]


TOKEN_FILE = "ui-token"


def kept_token(folder: Path, renew: bool = False) -> str:
    """The dashboard's token kept in ``folder`` (the registry's, private to its user), made
    on first use or when ``renew``; one that others could read or change is replaced."""
    path = folder / TOKEN_FILE
    if not renew:
        with contextlib.suppress(OSError):
            info = path.stat()
            token = path.read_text().strip()
            if info.st_uid == os.getuid() and not info.st_mode & 0o077 and len(token) >= 32:
                return token
    token = secrets.token_urlsafe(32)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(partial, path)
    return token


def host_name(host: str) -> str:
    """``host`` as a URL or a Host header names it: an IPv6 address in brackets."""
    return f"[{host.strip('[]')}]" if ":" in host else host


def loopback_hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers that name this machine's loopback address ``host`` (as --host gave
    it: 127.0.0.2 too) at ``port``."""
    names = ("127.0.0.1", "localhost", "[::1]", host_name(host))
    return frozenset(f"{name}:{port}" for name in names)


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class Guard:
    """Checks each request against the token (and, for actions, its origin) before the app
    sees it, and adds HEADERS to every answer. ``hosts``: the Host headers accepted (None:
    any, for --allow-remote)."""

    def __init__(self, app: ASGIApp, token: str, port: int, hosts: frozenset[str] | None):
        self.app = app
        self.token = token
        self.cookie = f"easylaunch-ui-{port}"  # (cookies are shared by a host's ports)
        self.hosts = hosts

    def check(self, request: Request) -> Response | None:
        """The answer that refuses (or redirects) ``request``; None lets it through."""
        host = request.headers.get("host", "")
        if self.hosts is not None and host not in self.hosts:
            return PlainTextResponse(f"unexpected Host {host!r}: open the dashboard at the "
                                     "address easylaunch ui printed", 400)
        query = request.query_params
        if request.method in SAFE_METHODS and _same(query.get(TOKEN_PARAM), self.token):
            rest = urlencode([(k, v) for k, v in query.multi_items() if k != TOKEN_PARAM])
            # (one leading slash: //evil.example/ would name another site; a backslash,
            # which browsers read as a slash, is %5C in request.url)
            path = "/" + request.url.path.lstrip("/")
            answer = RedirectResponse(path + (f"?{rest}" if rest else ""), 303)
            answer.set_cookie(self.cookie, self.token, httponly=True, samesite="strict")
            return answer
        if not _same(request.cookies.get(self.cookie), self.token):
            return PlainTextResponse("this dashboard needs its token: open the URL that "
                                     "`easylaunch ui` printed (it ends in ?token=...)", 403)
        if request.method in SAFE_METHODS:
            return None
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{host}":
            return PlainTextResponse(f"refused: a request from another origin ({origin})", 403)
        if request.headers.get("sec-fetch-site", "same-origin") != "same-origin":
            return PlainTextResponse("refused: a request from another site", 403)
        if not _same(request.headers.get(TOKEN_HEADER), self.token):
            return PlainTextResponse(f"refused: no valid {TOKEN_HEADER} header", 403)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sealed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        refusal = self.check(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, sealed)
        else:
            await self.app(scope, receive, sealed)

"""``easylaunch ui``: check the address, bind it, print the URL (with the kept token) and
serve the dashboard with uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
import webbrowser

from easylaunch.errors import EasyLaunchError, needed
from easylaunch.settings import load_settings
from easylaunch.tracking.registry import open_registry

# what the dashboard imports (the ui extra), checked before any of its modules is imported
NEEDED = ("starlette", "uvicorn", "jinja2", "pandas")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise EasyLaunchError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick "
                              "another --port (0: any free one)") from None
    return sock


def serve_command(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; refuses a non-loopback ``--host`` without
    ``--allow-remote``."""
    for name in NEEDED:
        needed(name, "ui", "ui", f"{', '.join(NEEDED[:-1])} and {NEEDED[-1]}")
    loopback = is_loopback(args.host)
    if not loopback and not args.allow_remote:
        raise EasyLaunchError(
            f"--host {args.host} is not a loopback address: whoever reaches it and learns the "
            "token could read your logs and cancel runs. Add --allow-remote to listen there "
            f"anyway, or keep 127.0.0.1 and tunnel: ssh -L {args.port or 8765}:127.0.0.1:"
            f"{args.port or 8765} THIS-HOST")
    import uvicorn

    from easylaunch.dashboard.app import create_app  # (the ui extra: starlette, jinja2)
    from easylaunch.dashboard.security import host_name, kept_token, loopback_hosts

    sock = bind(args.host, args.port)
    port = sock.getsockname()[1]
    token = kept_token(open_registry(load_settings(args.config).REGISTRY_PATH).path.parent,
                       renew=args.new_token)
    app = create_app(args.config, token, port,
                     loopback_hosts(args.host, port) if loopback else None)
    shown_host = socket.gethostname() if args.host in ("0.0.0.0", "::") else args.host
    url = f"http://{host_name(shown_host)}:{port}/?token={token}"
    if not loopback:
        print(f"easylaunch ui: warning: listening on {args.host}, not loopback: anyone who "
              "can reach this port and gets the URL below can see your runs and act on them; "
              "the traffic is not encrypted", file=sys.stderr)
    print(f"easylaunch ui: {url}  (Ctrl-C stops it)", flush=True)
    if args.open:
        webbrowser.open(url)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           proxy_headers=False))
    server.run(sockets=[sock])
    return 0

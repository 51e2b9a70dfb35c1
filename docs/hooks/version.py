"""mkdocs hook: the site's header names the version it documents."""

from __future__ import annotations

from typing import Any

from easylaunch import __version__


def on_config(config: Any, **_: Any) -> Any:
    """``easylaunch 0.1.0`` in the header and the page titles."""
    config.site_name = f"{config.site_name} {__version__}"
    return config

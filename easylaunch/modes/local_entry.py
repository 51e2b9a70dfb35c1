"""``local``'s registry entry: runs in this process's care (:class:`.local.LocalMode`), or with
``detach`` (LOCAL_DETACH by default) under a supervisor of their own
(:class:`.local_detached.DetachedLocalMode`, imported only then: it brings the transport's
machinery, which a local run does not need)."""

from __future__ import annotations

from typing import Any

from easylaunch.modes.base import Mode
from easylaunch.modes.local import LocalMode
from easylaunch.settings import Settings


class LocalEntry:
    """Used as a Mode class is: ``name``, ``options``, ``restarts``, ``create``."""

    name = LocalMode.name
    options = LocalMode.options
    restarts = LocalMode.restarts
    needs_bundle = True

    @staticmethod
    def create(settings: Settings, mode_options: dict[str, Any]) -> Mode:
        attached = LocalMode.create(settings, mode_options)  # (detach checked there)
        detach = mode_options.get("detach")
        if not (settings.LOCAL_DETACH if detach is None else detach):
            return attached
        from easylaunch.modes.local_detached import DetachedLocalMode

        return DetachedLocalMode(settings, mode_options)


LOCAL = LocalEntry()

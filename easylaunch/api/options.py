"""A launch's keywords and what they make, checked before anything is written: the
experiment's name, :class:`LaunchOptions` (``run_sweep``'s keywords besides the function and
its variants), the settings and mode object they give, and the variants."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from easylaunch.errors import LaunchError, notice
from easylaunch.modes import get_mode, restarting_modes
from easylaunch.modes.base import Mode
from easylaunch.runs.commands import multi_process_options
from easylaunch.runs.process import notebook_path
from easylaunch.runs.rebuild import KEYWORDS_SOURCE
from easylaunch.runs.variants import check_variant
from easylaunch.settings import ConfigArg, Settings, load_settings, override
from easylaunch.settings.doodad_names import split_call_keywords
from easylaunch.tracking.registry import Registry, open_registry

EXP_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def check_exp_name(exp_name: Any, what: str = "exp_name") -> str:
    """Return ``exp_name`` if it is a safe folder name, else explain what to change (``what``:
    the keyword it came as)."""
    if not isinstance(exp_name, str) or not exp_name:
        raise LaunchError(f"{what} must be a non-empty string, got {exp_name!r}")
    if EXP_NAME_PATTERN.fullmatch(exp_name) and ".." not in exp_name:
        return exp_name
    suggestion = re.sub(r"[^A-Za-z0-9._+-]+", "-", exp_name).replace("..", ".").strip("-.")
    raise LaunchError(
        f"{what} {exp_name!r} cannot be used: it becomes a folder name, so it may hold only "
        "letters, digits and . _ + - (no '/', '..', spaces or shell characters), start with a "
        f"letter or digit, and be at most 100 characters. Try {suggestion or 'my-exp'!r}.")


def script_name() -> str:
    """The launching script's path: a notebook's (see :func:`notebook_path`), empty for
    an interactive session."""
    notebook = notebook_path()
    if notebook is not None:
        return notebook
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "")
    return os.path.abspath(path) if path else ""


def registry_of(settings: Settings) -> Registry:
    """The registry the settings name."""
    return open_registry(settings.REGISTRY_PATH)


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """A launch's keywords besides the function and its variants (:func:`run_sweep`'s), given
    by name: a new option is one field here, and what builds one names what it sets."""

    exp_name: str = "default"
    mode: str = "local"
    prepend_date_to_exp_name: bool = True
    use_gpu: bool = False
    gpu_id: int | str | None = None
    base_log_dir: str | os.PathLike | None = None
    slurm_config_name: str | None = None
    config: ConfigArg = None
    max_restarts: int | None = None
    restart_on_error: bool | None = None
    dry_run: bool | None = None
    mode_options: dict[str, Any] = field(default_factory=dict)
    sweep: str | None = None  # the sweep's name (None: a generated id)
    resume: bool | str = False  # launch only what did not succeed (a str: the sweep's id)
    trackers: list[str] | None = None  # TRACKERS for this launch
    launch_line: bool | None = None  # LAUNCH_LINE for this launch (a search's trials: off)


def launch_options(exp_name: str, mode: str, keywords: dict[str, Any]) -> LaunchOptions:
    """:class:`LaunchOptions` from a launch's keywords (those it does not name are the mode's
    options)."""
    names = {f.name for f in dataclasses.fields(LaunchOptions)} - {"mode_options"}
    given = {k: v for k, v in keywords.items() if k in names}
    return LaunchOptions(exp_name=exp_name, mode=mode, **given, mode_options={
        k: v for k, v in keywords.items() if k not in names})


def mode_for(opts: LaunchOptions) -> tuple[Settings, Mode, dict[str, Any]]:
    """The launch's settings (its keywords applied), its mode object, and the mode options."""
    settings = load_settings(opts.config)
    kind = get_mode(opts.mode)
    given = dict(opts.mode_options)
    if "multi_process" in given:  # -n N / n_gpus=N, one process per GPU or per node
        given.update(multi_process_options(
            opts.mode, kind.options, given.pop("n_gpus", None), given.pop("multi_process"),
            opts.use_gpu, given.pop("n_nodes", None)))
    overrides, mode_options, ignored = split_call_keywords(
        opts.mode, given, kind.options,
        [f.name for f in dataclasses.fields(LaunchOptions) if f.name != "mode_options"])
    if ignored:
        notice(f"mode {opts.mode!r} ignores {', '.join(ignored)}, as doodad's did")
    overrides.update({key: value for key, value in (("MAX_RESTARTS", opts.max_restarts),
                                                     ("RESTART_ON_ERROR", opts.restart_on_error),
                                                     ("TRACKERS", opts.trackers),
                                                     ("LAUNCH_LINE", opts.launch_line))
                      if value is not None})
    if overrides:
        settings = override(settings, overrides, f"{KEYWORDS_SOURCE} of mode {opts.mode!r}")
    mode_obj = kind.create(settings, mode_options)
    if settings.MAX_RESTARTS and not mode_obj.restarts:
        raise LaunchError(f"mode {opts.mode!r} cannot restart runs (max_restarts="
                          f"{settings.MAX_RESTARTS}); modes that can: "
                          f"{', '.join(restarting_modes())}. Pass max_restarts=0 here")
    return settings, mode_obj, mode_options


def checked_variants(method_call: Any, variants: Any, use_gpu: Any) -> list[dict]:
    """The variants as dicts, once the function, the variants and use_gpu are checked."""
    if not callable(method_call):
        raise LaunchError(f"method_call must be a function, got {type(method_call).__name__}")
    if isinstance(variants, (Mapping, str)) or not isinstance(variants, Iterable):
        raise LaunchError("variants must be a list of dicts; for a single variant use "
                          "run_experiment(..., variant=...)")
    checked = [check_variant(v, i) for i, v in enumerate(variants)]
    if not checked:
        raise LaunchError("variants is empty: nothing to launch")
    if not isinstance(use_gpu, bool):
        raise LaunchError(f"use_gpu must be True or False, got {use_gpu!r}")
    return checked

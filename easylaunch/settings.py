"""Settings: find the user's config file, fill in defaults, check every value.

A settings file is Python with UPPERCASE names, like doodad's config. ``config_template.py``
holds every key with its default and its type annotation; user values are checked against those
annotations, so the template is the single source of truth.
"""

from __future__ import annotations

import difflib
import os
import runpy
import types
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from easylaunch import config_template
from easylaunch.errors import SettingsError

ENV_CONFIG = "EASYLAUNCH_CONFIG"
LOCAL_CONFIG_NAME = "easylaunch_config.py"
USER_CONFIG_PATH = Path("~/.config/easylaunch/config.py")
TEMPLATE_PATH = Path(config_template.__file__)
DEFAULT_SOURCE = "default (config_template.py)"

ConfigArg = str | os.PathLike | Mapping[str, Any] | None


def _uppercase(namespace: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in namespace.items() if k.isupper() and not k.startswith("_")}


DEFAULTS: dict[str, Any] = _uppercase(vars(config_template))
TYPES: dict[str, Any] = dict(config_template.__annotations__)


@dataclass(frozen=True)
class Mount:
    """A local folder and where the job sees it."""

    local_dir: str
    mount_point: str


class Settings(Mapping[str, Any]):
    """The effective settings: values by key, and the file each value came from."""

    def __init__(self, values: dict[str, Any], sources: dict[str, str], path: str | None):
        self._values = values
        self.sources = sources
        self.path = path

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    def code_mounts(self) -> list[Mount]:
        """CODE_DIRS_TO_MOUNT as checked, absolute mounts (mount_point defaults to /code/<name>)."""
        mounts = []
        for entry in self._values["CODE_DIRS_TO_MOUNT"]:
            if isinstance(entry, (str, os.PathLike)):
                entry = {"local_dir": entry}
            mounts.append(self._mount("CODE_DIRS_TO_MOUNT", entry, default_prefix="/code"))
        return mounts

    def data_mounts(self) -> list[Mount]:
        """NON_CODE_DIRS_TO_MOUNT as checked, absolute mounts."""
        return [self._mount("NON_CODE_DIRS_TO_MOUNT", e, default_prefix=None)
                for e in self._values["NON_CODE_DIRS_TO_MOUNT"]]

    def _mount(self, key: str, entry: Any, default_prefix: str | None) -> Mount:
        where = f"{key} in {self.sources.get(key)}"
        if not isinstance(entry, Mapping) or "local_dir" not in entry:
            raise SettingsError(
                f"{where}: each entry must be dict(local_dir=..., mount_point=...), got {entry!r}")
        unknown = set(entry) - {"local_dir", "mount_point"}
        if unknown:
            raise SettingsError(f"{where}: unknown field(s) {sorted(unknown)} in {entry!r}; "
                                "only local_dir and mount_point are read")
        local_dir = os.path.abspath(os.path.expanduser(os.fspath(entry["local_dir"])))
        if not os.path.isdir(local_dir):
            raise SettingsError(f"{where}: local_dir {local_dir!r} is not an existing folder; "
                                "create it or remove the entry")
        mount_point = entry.get("mount_point")
        if mount_point is None:
            if default_prefix is None:
                raise SettingsError(f"{where}: {entry!r} has no mount_point")
            mount_point = f"{default_prefix}/{os.path.basename(local_dir)}"
        if not os.path.isabs(mount_point):
            raise SettingsError(f"{where}: mount_point {mount_point!r} must be an absolute path")
        return Mount(local_dir, os.path.normpath(mount_point))


def _type_ok(value: Any, annotation: Any) -> bool:
    if isinstance(annotation, types.UnionType) or get_origin(annotation) is Union:
        return any(_type_ok(value, a) for a in get_args(annotation))
    if annotation is type(None):
        return value is None
    origin = get_origin(annotation) or annotation
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin)


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation)


def find_config_path(config: str | os.PathLike | None = None) -> Path | None:
    """The settings file that applies: config=, then $EASYLAUNCH_CONFIG, ./, ~/.config."""
    if config is not None:
        path = Path(config).expanduser()
        if not path.is_file():
            raise SettingsError(f"config={os.fspath(config)!r} is not a file; "
                                "pass the path of an easylaunch settings file")
        return path
    if os.environ.get(ENV_CONFIG):
        path = Path(os.environ[ENV_CONFIG]).expanduser()
        if not path.is_file():
            raise SettingsError(f"{ENV_CONFIG}={os.environ[ENV_CONFIG]!r} is not a file; "
                                f"unset it or point it at a settings file")
        return path
    for path in (Path(LOCAL_CONFIG_NAME), USER_CONFIG_PATH.expanduser()):
        if path.is_file():
            return path
    return None


def check_values(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Type-check user values against the template; warn about unknown names."""
    checked = {}
    for key, value in _uppercase(values).items():
        if key not in DEFAULTS:
            close = difflib.get_close_matches(key, list(DEFAULTS), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            warnings.warn(f"{source}: unknown setting {key}{hint}", UserWarning, stacklevel=3)
            continue
        annotation = TYPES.get(key)
        if annotation is not None and not _type_ok(value, annotation):
            raise SettingsError(
                f"{source}: {key} must be {_type_name(annotation)}, got "
                f"{type(value).__name__} {value!r} (see config_template.py for its meaning)")
        checked[key] = value
    return checked


_cache: dict[tuple, Settings] = {}


def _read_file(path: Path) -> dict[str, Any]:
    try:
        return runpy.run_path(str(path))
    except Exception as exc:  # noqa: BLE001 - any error in the user's file is reported the same
        raise SettingsError(f"cannot read settings file {path}: {exc!r}") from exc


def load_settings(config: ConfigArg = None) -> Settings:
    """Load the effective settings (see config_template.py for the lookup order)."""
    if isinstance(config, Mapping):
        values = check_values(config, "config= argument")
        sources = {k: "config= argument" for k in values}
        return _merge(values, sources, None)
    path = find_config_path(config)
    if path is None:
        return _merge({}, {}, None)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        values = check_values(_read_file(path), str(path))
        _cache[key] = _merge(values, {k: str(path) for k in values}, str(path))
    return _cache[key]


def _merge(values: dict[str, Any], sources: dict[str, str], path: str | None) -> Settings:
    merged = dict(DEFAULTS, **values)
    all_sources = {k: sources.get(k, DEFAULT_SOURCE) for k in merged}
    return Settings(merged, all_sources, path)


def write_template(dest: str | os.PathLike) -> Path:
    """Write a private copy of the settings template; never overwrite an existing file."""
    dest = Path(dest).expanduser()
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(dest, "x") as f:
            f.write(TEMPLATE_PATH.read_text())
    except FileExistsError:
        raise SettingsError(f"{dest} already exists; edit it, or move it away first") from None
    return dest

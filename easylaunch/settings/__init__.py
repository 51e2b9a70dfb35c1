"""Settings: find the user's config file, fill in defaults, check every value.

A settings file is Python with UPPERCASE names, like doodad's config. ``config_template.py``
(at the checkout's top level; ``settings/template.py`` links to it, and a wheel holds it there)
holds every key with its default and its type annotation; user values are checked against those
annotations, so the template is the single source of truth.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import runpy
import shlex
import traceback
import types
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from easylaunch.errors import SettingsError, did_you_mean
from easylaunch.settings import entries, template
from easylaunch.settings.doodad_names import DOODAD_KEYS, translate_settings
from easylaunch_job.records import write_bytes_atomic
from easylaunch_job.trackers import TRACKER_NAMES

ENV_CONFIG = "EASYLAUNCH_CONFIG"
LOCAL_CONFIG_NAME = "easylaunch_config.py"
USER_CONFIG_PATH = Path("~/.config/easylaunch/config.py")
TEMPLATE_PATH = Path(template.__file__).resolve()  # (in a checkout: ../../config_template.py)
DEFAULT_SOURCE = "default (config_template.py)"
MAPPING_SOURCE = "config= argument"

ConfigArg = str | os.PathLike | Mapping[str, Any] | None


def _uppercase(namespace: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in namespace.items() if k.isupper() and not k.startswith("_")}


DEFAULTS: dict[str, Any] = _uppercase(vars(template))
TYPES: dict[str, Any] = dict(template.__annotations__)


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

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    def code_mounts(self, key: str = "CODE_DIRS_TO_MOUNT") -> list[Mount]:
        """A list of code folders as checked mounts (mount_point defaults to /code/<name>).

        ``SSS_CODE_DIRS_TO_MOUNT`` holds cluster paths, which are not checked for existence.
        """
        mounts = []
        for entry in self._values[key]:
            if isinstance(entry, (str, os.PathLike)):
                entry = {"local_dir": entry}
            mounts.append(self._mount(key, entry, default_prefix="/code"))
        return mounts

    def cluster_copies(self) -> dict[str, Mount]:
        """The code folders a cluster keeps its own copy of (sss, htp): CODE_DIRS_TO_MOUNT
        entries whose folder name (or mount point) an SSS_CODE_DIRS_TO_MOUNT entry shares,
        as doodad users write them; local folder -> the cluster copy's mount."""
        there = self.code_mounts("SSS_CODE_DIRS_TO_MOUNT")
        copies = {}
        for mount in self.code_mounts():
            name = os.path.basename(mount.local_dir.rstrip("/"))
            match = next((m for m in there if m.mount_point == mount.mount_point
                          or os.path.basename(m.local_dir.rstrip("/")) == name), None)
            if match is not None:
                copies[mount.local_dir] = match
        return copies

    def data_mounts(self, key: str = "NON_CODE_DIRS_TO_MOUNT") -> list[Mount]:
        """A list of data folders as checked mounts (cluster paths for the SSS_ key); two
        folders at one mount_point are refused."""
        mounts = [self._mount(key, e, default_prefix=None) for e in self._values[key]]
        taken: dict[str, str] = {}
        for mount in mounts:
            if mount.mount_point in taken:
                raise SettingsError(
                    f"{key} in {self.sources.get(key)}: {taken[mount.mount_point]} and "
                    f"{mount.local_dir} both have mount_point {mount.mount_point}; give each "
                    "folder its own mount_point")
            taken[mount.mount_point] = mount.local_dir
        return mounts

    def _mount(self, key: str, entry: Any, default_prefix: str | None) -> Mount:
        where = f"{key} in {self.sources.get(key)}"
        if not isinstance(entry, Mapping) or "local_dir" not in entry:
            raise SettingsError(
                f"{where}: each entry must be dict(local_dir=..., mount_point=...), got {entry!r}")
        unknown = set(entry) - {"local_dir", "mount_point"}
        if unknown:
            raise SettingsError(f"{where}: unknown field(s) {sorted(unknown)} in {entry!r}; "
                                "only local_dir and mount_point are read")
        local_dir = os.fspath(entry["local_dir"])
        on_cluster = key.startswith("SSS_")
        if on_cluster and not os.path.isabs(local_dir):
            raise SettingsError(f"{where}: local_dir {local_dir!r} must be an absolute path on "
                                "the cluster")
        local_dir = os.path.abspath(os.path.expanduser(local_dir))
        if not on_cluster and not os.path.isdir(local_dir):
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


def _strings(value: list) -> bool:
    return all(isinstance(v, str) for v in value)


def _words(value: list) -> bool:
    return all(isinstance(v, str) and v for v in value)


# Checks beyond the type, for the keys that need them: (test, what the value must be).
CONSTRAINTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "CODE_SNAPSHOT_EXCLUDES": (_strings, "a list of strings (glob patterns)"),
    "CODE_SNAPSHOT_MAX_MB": (lambda v: v > 0, "a positive number"),
    "LOCAL_LOG_DIR": (lambda v: bool(os.fspath(v).strip()),
                      "a folder path (empty would put runs in the working directory)"),
    "RUN_FOLDER_MODE": (lambda v: 0 <= v <= 0o777 and v & 0o700 == 0o700,
                        "permission bits such as 0o700 or 0o750 (you keep rwx)"),
    "LARGE_PAYLOAD_WARN_MB": (lambda v: v > 0, "a positive number"),
    "MAX_RESTARTS": (lambda v: 0 <= v <= 1000, "a whole number from 0 to 1000"),
    "TRACKERS": (lambda v: all(t in TRACKER_NAMES for t in v),
                 f"a list of {', '.join(map(repr, TRACKER_NAMES))}"),
    "CHECKPOINT_GRACE_SECONDS": (lambda v: 0 <= v < 86400, "0 or more seconds, below a day"),
    "LOCAL_CANCEL_GRACE_SECONDS": (lambda v: 0 <= v < 86400, "0 or more seconds, below a day"),
    "LOCAL_GPU_IDS": (lambda v: v is None or all(isinstance(g, (int, str)) for g in v),
                      "None or a list of GPU ids"),
    "SLURM_SIGNAL_SECONDS": (lambda v: v >= 0, "0 or more"),
    "PBS_SIGNAL_SECONDS": (lambda v: v >= 0, "0 or more"),
    "SLURM_PRE_CMDS": (_strings, "a list of shell commands (strings)"),
    "SSS_PRE_CMDS": (_strings, "a list of shell commands (strings)"),
    "HTP_RUNNER": (lambda v: v in ("packer", "ht_helper"), '"packer" or "ht_helper"'),
    "AWS_SYNC_INTERVAL_SECONDS": (lambda v: v > 0, "more than 0 seconds"),
    "AWS_SPOT_PRICE": (lambda v: v is None or v > 0,
                       "None (on-demand) or a price in USD per hour above 0"),
    "AWS_GPU_SPOT_PRICE": (lambda v: v is None or v > 0,
                           "None (AWS_SPOT_PRICE) or a price in USD per hour above 0"),
    "SINGULARITY_PRE_CMDS": (_strings, "a list of shell commands (strings)"),
    "DOCKER_ENGINE": (lambda v: v in (None, "docker", "podman"), 'None, "docker" or "podman"'),
    "AWS_SECURITY_GROUP_IDS": (_words, "a list of non-empty strings"),
    "AWS_FILE_PATTERNS_TO_SAVE": (_words, "a list of non-empty strings"),
    "AWS_PIP_REQUIREMENTS": (_words, "a list of non-empty strings"),
    "GCP_SYNC_INTERVAL_SECONDS": (lambda v: v > 0, "more than 0 seconds"),
    "GCP_DISK_SIZE_GB": (lambda v: v >= 10, "at least 10 (GB)"),
    "GCP_GPU_COUNT": (lambda v: v >= 1, "1 or more"),
    "GCP_SCOPES": (_words, "a list of non-empty strings"),
    "GCP_FILE_PATTERNS_TO_SAVE": (_words, "a list of non-empty strings"),
    "GCP_PIP_REQUIREMENTS": (_words, "a list of non-empty strings"),
}


def _configs_problem(configs: dict) -> str | None:
    """What is wrong with the shape of a scheduler's entries (SLURM_CONFIGS): a dict of
    named dicts of fields (None when nothing is)."""
    for name, cfg in configs.items():
        if not isinstance(name, str):
            return f" keys are config names and must be strings, got {name!r}"
        if not isinstance(cfg, Mapping):
            return (f"[{name!r}] must be a dict of fields, got {type(cfg).__name__} {cfg!r}")
        bad = [k for k in cfg if not isinstance(k, str)]
        if bad:
            return f"[{name!r}] has a field name that is not a string: {bad[0]!r}"
    return None



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
    if origin is str:
        return isinstance(value, (str, os.PathLike))
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


# Settings that hold command-line arguments as one string; a list of them is joined.
ARGUMENT_STRINGS = frozenset({"BRC_EXTRA_SINGULARITY_ARGS"})


def check_values(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Type-check user values against the template (doodad's keys taken under easylaunch's
    names first); warn about unknown names."""
    checked = {}
    for key in values:
        if not isinstance(key, str):
            raise SettingsError(f"{source}: setting names must be strings, got {key!r}")
    if isinstance(values, Mapping) and source == MAPPING_SOURCE:
        for key in values:
            if not key.isupper() and key.upper() in DEFAULTS:
                warnings.warn(f"{source}: {key!r} is ignored: settings are UPPERCASE "
                              f"({key.upper()})", UserWarning, stacklevel=3)
    try:
        translated, written = translate_settings(_uppercase(values))
    except SettingsError as exc:
        raise SettingsError(f"{source}: {exc}") from None
    for key, value in translated.items():
        name = f"{written[key]} (easylaunch's {key})" if key in written else key
        if key not in DEFAULTS:
            hint = did_you_mean(key, [*DEFAULTS, *DOODAD_KEYS])
            warnings.warn(f"{source}: unknown setting {key}{hint}", UserWarning, stacklevel=3)
            continue
        if key in ARGUMENT_STRINGS and isinstance(value, (list, tuple)) \
                and all(isinstance(v, str) for v in value):
            value = shlex.join(value)  # (a list of arguments, as some doodad configs write it)
        annotation = TYPES.get(key)
        if annotation is not None and not _type_ok(value, annotation):
            raise SettingsError(
                f"{source}: {name} must be {_type_name(annotation)}, got "
                f"{type(value).__name__} {value!r} (see config_template.py for its meaning)")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        test, must = CONSTRAINTS.get(key, (None, ""))
        if test is not None and not (value == value and test(value)):  # NaN fails too
            raise SettingsError(f"{source}: {name} must be {must}, got {value!r}")
        if key in entries.CHECKS:  # (a scheduler's entries: their shape, then each field)
            problem = _configs_problem(value)
            if problem:
                raise SettingsError(f"{source}: {name}{problem}")
            value = entries.filled(key, value, DEFAULTS[key], source)
        checked[key] = value
    return checked


_cache: dict[tuple, Settings] = {}


def read_settings_file(path: Path) -> dict[str, Any]:
    """The names a settings file assigns (a doodad import names the line to delete)."""
    try:
        return runpy.run_path(str(path))
    except SystemExit as exc:
        raise SettingsError(f"settings file {path} called sys.exit({exc.code!r}) while being "
                            "read; a settings file only assigns UPPERCASE names") from None
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "doodad":
            raise SettingsError(f"cannot read settings file {path}: {exc!r}") from exc
        line = next((f for f in reversed(traceback.extract_tb(exc.__traceback__))
                     if os.path.realpath(f.filename) == os.path.realpath(path)), None)
        where = f"line {line.lineno} ({line.line})" if line else "its import of doodad"
        raise SettingsError(f"settings file {path} imports doodad at {where}; easylaunch "
                            "reads doodad's settings without doodad: delete that line (and "
                            "any value that uses it)") from None
    except Exception as exc:  # noqa: BLE001 - any error in the user's file is reported the same
        raise SettingsError(f"cannot read settings file {path}: {exc!r}") from exc


def load_settings(config: ConfigArg = None) -> Settings:
    """Load the effective settings (see config_template.py for the lookup order)."""
    if isinstance(config, Mapping):
        values = check_values(config, MAPPING_SOURCE)
        sources = {k: MAPPING_SOURCE for k in values}
        return _merge(values, sources, None)
    path = find_config_path(config)
    if path is None:
        return _defaults()
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        values = check_values(read_settings_file(path), str(path))
        _cache[key] = _merge(values, {k: str(path) for k in values}, str(path))
    return _cache[key]


@functools.lru_cache(maxsize=1)
def _defaults() -> Settings:
    """The settings where no file sets any (one object: what it keeps is kept once)."""
    return _merge({}, {}, None)


def _merge(values: dict[str, Any], sources: dict[str, str], path: str | None) -> Settings:
    merged = dict(DEFAULTS, **values)
    all_sources = {k: sources.get(k, DEFAULT_SOURCE) for k in merged}
    return Settings(merged, all_sources, path)


def override(settings: Settings, values: Mapping[str, Any], source: str) -> Settings:
    """``settings`` with ``values`` in place of theirs, checked as a settings file's are."""
    checked = check_values(values, source)
    return Settings(dict(settings, **checked),
                    dict(settings.sources, **dict.fromkeys(checked, source)), settings.path)


# Settings that are credentials (doodad's AZ_SECRET, AZ_CONN_STR): never saved with a launch; a
# later process takes them from its own settings (or, for azure-identity, the environment).
CREDENTIAL_KEYS = ("AZURE_CLIENT_SECRET", "AZURE_STORAGE_CONNECTION_STRING")


def save_settings(settings: Settings, store: Path) -> Path:
    """Keep the effective settings of a launch (once per unique content, credentials left
    out) for tracking and resubmitting."""
    kept_in: dict[Path, Path] = vars(settings).setdefault("_kept_in", {})  # by store
    if store in kept_in and kept_in[store].exists():  # (these settings, launching again)
        return kept_in[store]
    kept = {k: v for k, v in settings.items() if k not in CREDENTIAL_KEYS}
    data = json.dumps(kept, sort_keys=True, default=repr).encode()
    path = store / f"{hashlib.sha256(data).hexdigest()[:16]}.json"
    if not path.exists():
        store.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_bytes_atomic(str(path), data, private=True)
    kept_in[store] = path
    return path


@functools.lru_cache(maxsize=16)
def _saved(path: str) -> Settings:
    with open(path) as f:
        values = json.load(f)
    with warnings.catch_warnings():  # a key a later version dropped is no news to anyone here
        warnings.simplefilter("ignore")
        return load_settings(values)


def launch_settings(settings_file: str | None) -> Settings:
    """The settings a launch saved (save_settings), so a later process tracks, cancels and
    resubmits its runs as launched; the effective settings now if that file is gone or no
    longer reads."""
    if settings_file:
        try:
            saved = _saved(settings_file)  # named by content: the same file never changes
        except (OSError, ValueError):  # SettingsError is a ValueError
            pass
        else:
            return _with_credentials(saved)
    return load_settings()


def _with_credentials(saved: Settings) -> Settings:
    """``saved`` with the credentials of the settings in effect now (which it left out)."""
    try:
        now = load_settings()
    except (OSError, ValueError):
        return saved
    found = {k: now[k] for k in CREDENTIAL_KEYS if now[k] is not None}
    return override(saved, found, "the settings in effect now") if found else saved

"""doodad's names onto easylaunch's: settings keys and ``run_experiment`` keywords, in one place.

The settings loader applies :func:`translate_settings` before it checks anything, so every later
check speaks easylaunch's names while messages still name the key the user wrote. ``api`` applies
:func:`split_call_keywords` to the keywords of a launch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from easylaunch.errors import LaunchError, SettingsError, did_you_mean

PLACEHOLDER = "TODO"  # doodad's template value for "not set yet"


@dataclass(frozen=True)
class Renamed:
    """A doodad key whose value an easylaunch key holds (``convert`` adapts the value)."""

    target: str
    convert: Callable[[Any], Any] = lambda v: v


@dataclass(frozen=True)
class Extends:
    """A doodad list whose entries join an easylaunch list (both apply, as in doodad)."""

    target: str


@dataclass(frozen=True)
class Spread:
    """A doodad dict whose entries set several easylaunch keys."""

    targets: dict[str, str]  # doodad's field (``a.b`` for nested) -> easylaunch key
    not_needed: tuple[str, ...] = ()  # fields easylaunch does without


@dataclass(frozen=True)
class NotNeeded:
    """A doodad key easylaunch does without, and why."""

    why: str


def _list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _bucket_url(value: Any) -> Any:
    return f"gs://{value}" if isinstance(value, str) and "://" not in value else value


def _container_url(value: Any) -> Any:
    return f"az://{value}/easylaunch" if isinstance(value, str) and "://" not in value else value


_RUNNER = ("the bundle's job side (job.pyz) does its job, on any machine, with no doodad "
           "checkout there")
_NOT_DOODAD = ("kept in configs from rlkit's older doodad launcher; doodad's easy_launch never "
               "read it either")

# doodad key -> what easylaunch makes of it. Keys with the same name in both are not listed.
DOODAD_KEYS: dict[str, Renamed | Extends | Spread | NotNeeded] = {
    "EXTRA_SINGULARITY_ARGS": Renamed("BRC_EXTRA_SINGULARITY_ARGS"),
    "DIR_AND_MOUNT_POINT_MAPPINGS": Extends("NON_CODE_DIRS_TO_MOUNT"),
    "SSS_DIR_AND_MOUNT_POINT_MAPPINGS": Extends("SSS_NON_CODE_DIRS_TO_MOUNT"),
    "INSTANCE_TYPE": Renamed("AWS_INSTANCE_TYPE"),
    "GPU_INSTANCE_TYPE": Renamed("AWS_GPU_INSTANCE_TYPE"),
    "SPOT_PRICE": Renamed("AWS_SPOT_PRICE"),
    "GPU_SPOT_PRICE": Renamed("AWS_GPU_SPOT_PRICE"),
    "REGION_TO_GPU_AWS_IMAGE_ID": Renamed("AWS_GPU_IMAGE_IDS"),
    "AWS_FILE_TYPES_TO_SAVE": Renamed("AWS_FILE_PATTERNS_TO_SAVE", _list),
    "DOODAD_DOCKER_IMAGE": Renamed("DOCKER_IMAGE"),
    "GPU_DOODAD_DOCKER_IMAGE": Renamed("GPU_DOCKER_IMAGE"),
    "GCP_IMAGE_NAME": Renamed("GCP_IMAGE"),
    "GCP_GPU_IMAGE_NAME": Renamed("GCP_GPU_IMAGE"),
    "GCP_BUCKET_NAME": Renamed("GCP_GCS_PATH", _bucket_url),
    "GCP_FILE_TYPES_TO_SAVE": Renamed("GCP_FILE_PATTERNS_TO_SAVE", _list),
    "GCP_DEFAULT_KWARGS": Spread(
        {"zone": "GCP_ZONE", "instance_type": "GCP_MACHINE_TYPE",
         "image_project": "GCP_IMAGE_PROJECT", "preemptible": "GCP_PREEMPTIBLE",
         "gpu_kwargs.gpu_model": "GCP_GPU_TYPE", "gpu_kwargs.num_gpu": "GCP_GPU_COUNT"},
        not_needed=("terminate",)),  # instances always delete themselves when done
    "OUTPUT_DIR_FOR_DOODAD_TARGET": NotNeeded(
        "runs write into their own run folder, which container modes mount at the same path"),
    "SSS_RUN_DOODAD_EXPERIMENT_SCRIPT_PATH": NotNeeded(_RUNNER),
    "RUN_DOODAD_EXPERIMENT_SCRIPT_PATH": NotNeeded(_RUNNER),
    "TASKFILE_DIR_ON_BRC": NotNeeded(
        "the batch folder holds its task file, and submit.sh points ht_helper.sh at it"),
    "REGION_TO_GPU_AWS_AVAIL_ZONE": NotNeeded("EC2 picks the zone of the default subnet, or "
                                              "of AWS_SUBNET_ID"),
    "SSH_HOSTS": Renamed("CLUSTERS"),
    "SSH_TMP_DIR": NotNeeded("the docker staging folder of doodad's ssh mode; easylaunch's "
                             "runs on the machine itself, in its SSH_LOG_DIR"),
    "BASE_CODE_DIR": NotNeeded(_NOT_DOODAD),
    "GPU_AWS_IMAGE_ID": NotNeeded(_NOT_DOODAD),
    "GPU_SINGULARITY_IMAGE": NotNeeded(_NOT_DOODAD),
    "SLURM_CPU_CONFIG": NotNeeded(_NOT_DOODAD + "; SLURM_CONFIGS['cpu'] is read"),
    "SLURM_GPU_CONFIG": NotNeeded(_NOT_DOODAD + "; SLURM_CONFIGS['gpu'] is read"),
    "SPOT_PRICE_LOOKUP": NotNeeded(_NOT_DOODAD),
    "BAIR_DATASET_LOCATION": NotNeeded(_NOT_DOODAD),
    "SPACEMOUSE_HOSTNAME": NotNeeded(_NOT_DOODAD),
    "GCP_BUCKET": NotNeeded(_NOT_DOODAD + "; GCP_BUCKET_NAME (or GCP_GCS_PATH) is read"),
    "S3_BUCKET": NotNeeded(_NOT_DOODAD + "; AWS_S3_PATH is read"),
    "AZ_SUB_ID": Renamed("AZURE_SUBSCRIPTION_ID"),
    "AZ_TENANT_ID": Renamed("AZURE_TENANT_ID"),
    "AZ_CLIENT_ID": Renamed("AZURE_CLIENT_ID"),
    "AZ_SECRET": Renamed("AZURE_CLIENT_SECRET"),
    "AZ_CONTAINER": Renamed("AZURE_STORAGE_PATH", _container_url),
    "AZ_CONN_STR": Renamed("AZURE_STORAGE_CONNECTION_STRING"),
    "DEFAULT_AZURE_REGION": Renamed("AZURE_LOCATION"),
    "DEFAULT_AZURE_INSTANCE_TYPE": Renamed("AZURE_VM_SIZE"),
    "DEFAULT_AZURE_GPU_MODEL": Renamed("AZURE_GPU_MODEL"),
}


def is_placeholder(value: Any) -> bool:
    """True for doodad's template value "TODO", which means "not set"."""
    return isinstance(value, str) and value.strip() == PLACEHOLDER


def _spread(key: str, spread: Spread, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SettingsError(f"{key} must be a dict such as dict(zone=..., gpu_kwargs=dict("
                            f"gpu_model=..., num_gpu=...)), got {type(value).__name__} {value!r}")
    out = {}
    fields = {f"{k}.{kk}": vv for k, v in value.items() if isinstance(v, Mapping)
              for kk, vv in v.items()}
    fields.update({k: v for k, v in value.items() if not isinstance(v, Mapping)})
    for field, field_value in fields.items():
        if field in spread.targets:
            out[spread.targets[field]] = field_value
        elif field not in spread.not_needed:
            hint = did_you_mean(field, spread.targets)
            raise SettingsError(f"{key}: unknown field {field!r}{hint} (known: "
                                f"{', '.join(spread.targets)})")
    return out


def translate_settings(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """doodad's keys turned into easylaunch's: (values, {easylaunch key: key written}).

    doodad's "TODO" placeholders count as not set. Two keys that land on one easylaunch key
    with different values are refused, naming both.
    """
    out: dict[str, Any] = {}
    written: dict[str, str] = {}

    def put(target: str, value: Any, origin: str) -> None:
        if target in out and out[target] != value:
            raise SettingsError(f"{written[target]} and {origin} both set {target}, to "
                                f"{out[target]!r} and {value!r}; keep one of them")
        out[target], written[target] = value, origin

    extended: dict[str, list[tuple[str, list]]] = {}
    for key, value in values.items():
        rule = DOODAD_KEYS.get(key) if isinstance(key, str) else None
        if is_placeholder(value) or isinstance(rule, NotNeeded):
            continue
        if rule is None:
            put(key, value, key)
        elif isinstance(rule, Renamed):
            put(rule.target, rule.convert(value), key)
        elif isinstance(rule, Extends):
            if not isinstance(value, (list, tuple)):
                raise SettingsError(f"{key} must be a list of dict(local_dir=..., mount_point="
                                    f"...), got {type(value).__name__} {value!r}")
            extended.setdefault(rule.target, []).append((key, list(value)))
        else:
            for target, field_value in _spread(key, rule, value).items():
                if not is_placeholder(field_value):
                    put(target, field_value, f"{key}[{target}]")
    for target, parts in extended.items():
        merged = list(out.get(target, []))
        if not isinstance(merged, list):
            continue  # the type check names the key
        for _key, entries in parts:
            merged += [e for e in entries if e not in merged]
        out[target] = merged
        written.setdefault(target, " + ".join(k for k, _ in parts))
    return out, {k: v for k, v in written.items() if v != k}


# ------------------------------------------------------------------------------------------
# run_experiment keywords
# ------------------------------------------------------------------------------------------

# Every keyword doodad's easy_launch run_experiment took beyond easylaunch's own arguments.
DOODAD_KEYWORDS = frozenset({
    "local_input_dir_to_mount_point_dict", "skip_wait", "sync_interval", "region",
    "instance_type", "spot_price", "verbose", "num_exps_per_instance", "docker_image",
    "time_in_mins", "ssh_host", "gcp_kwargs", "s3_log_prefix", "s3_log_name",
})

# Keywords that set settings in a mode, as doodad's did there: keyword -> settings keys.
KEYWORD_SETTINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "ec2": {"region": ("AWS_REGION",),
            "instance_type": ("AWS_INSTANCE_TYPE", "AWS_GPU_INSTANCE_TYPE"),
            "spot_price": ("AWS_SPOT_PRICE", "AWS_GPU_SPOT_PRICE"),
            "sync_interval": ("AWS_SYNC_INTERVAL_SECONDS",),
            "docker_image": ("AWS_DOCKER_IMAGE",)},
    "gcp": {"sync_interval": ("GCP_SYNC_INTERVAL_SECONDS",),
            "docker_image": ("GCP_DOCKER_IMAGE",)},
    "azure": {"region": ("AZURE_LOCATION",),
              "instance_type": ("AZURE_VM_SIZE", "AZURE_GPU_VM_SIZE"),
              "sync_interval": ("AZURE_SYNC_INTERVAL_SECONDS",),
              "docker_image": ("AZURE_DOCKER_IMAGE",)},
    "local_docker": {"docker_image": ("DOCKER_IMAGE", "GPU_DOCKER_IMAGE")},
    "ssh": {"ssh_host": ("SSH_DEFAULT_HOST",)},
}


def split_call_keywords(mode: str, keywords: Mapping[str, Any], accepted: Mapping[str, Any],
                        parameters: Iterable[str] = ()
                        ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Sort a launch's extra keywords: (settings they set, mode options, ignored names).

    A doodad keyword that sets a setting in this mode becomes that setting; one the mode takes
    stays a mode option; one doodad ignored in this mode is ignored (and named); anything else
    is refused with the closest known name (``parameters``: the launch function's own, named
    in that hint too).
    """
    settings: dict[str, Any] = {}
    options: dict[str, Any] = {}
    ignored: list[str] = []
    for name, value in keywords.items():
        if name in accepted:
            options[name] = value
        elif name in KEYWORD_SETTINGS.get(mode, {}):
            if value is not None:
                settings.update(dict.fromkeys(KEYWORD_SETTINGS[mode][name], value))
        elif name == "local_input_dir_to_mount_point_dict":
            if value is not None:
                raise LaunchError("local_input_dir_to_mount_point_dict is not supported (doodad "
                                  "never implemented it); list the folders in "
                                  "NON_CODE_DIRS_TO_MOUNT instead")
        elif name in DOODAD_KEYWORDS:
            ignored.append(name)
        else:
            known = sorted(set(accepted) | DOODAD_KEYWORDS | set(parameters))
            hint = did_you_mean(name, known)
            raise LaunchError(f"mode {mode!r} does not take the option {name!r}{hint} (it "
                              f"takes: {', '.join(sorted(accepted)) or 'none'})")
    return settings, options, ignored

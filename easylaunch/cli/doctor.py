"""``easylaunch doctor``: what a settings file (doodad's or ours) means, and what each mode lacks.

Each finding is a level ("ok", "info", "warn", "error") and a line of text; errors make the
command exit non-zero.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easylaunch import settings
from easylaunch.errors import EasyLaunchError, MissingExtra, SettingsError, did_you_mean, needed
from easylaunch.modes import all_modes, get_mode
from easylaunch.modes.scheduled.job_arrays import ArrayMode
from easylaunch.modes.schedulers import pbs, slurm
from easylaunch.settings import doodad_names as doodad
from easylaunch_job.environment import python_minor


@dataclass(frozen=True)
class Finding:
    level: str  # ok, info, warn, error
    text: str


# Commands each mode runs, as alternatives (any one of a group will do); a scheduler's job
# arrays' modes (slurm, pbs) run their scheduler's (see mode_commands).
MODE_COMMANDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "sss": (("rsync",), ("ssh",)),
    "htp": (("rsync",), ("ssh",)),
    "pbs_htp": (("rsync",), ("ssh",)),
    "ssh": (("ssh",), ("rsync",)),
    "local_singularity": (("singularity", "apptainer"),),
    "local_docker": (("docker", "podman"),),
}


def mode_commands() -> dict[str, tuple[tuple[str, ...], ...]]:
    """The commands each mode runs: :data:`MODE_COMMANDS`, and those of each mode that
    submits job arrays, from its scheduler (a scheduler added later included)."""
    found = {}
    for name in all_modes():
        try:
            kind = get_mode(name)
        except ImportError:  # (a cloud SDK not installed)
            continue
        scheduler = getattr(kind, "parts", {}).get("scheduler")
        if getattr(kind, "cls", None) is ArrayMode and scheduler is not None:
            found[name] = tuple((command,) for command in scheduler.commands())
    return {**found, **MODE_COMMANDS}


def _needs(s: settings.Settings, *keys: str) -> list[str]:
    return [f"{key} is not set" for key in keys if not s[key]]


def _batch_logs(s: settings.Settings, tool: str) -> list[str]:
    """SSS_LOG_DIR, where a batch mode's batch is copied by hand (submitted over SSH or on a
    login node, where ``tool`` is on PATH, the log folder has a default)."""
    submitted = s.SSS_SUBMIT is not False and (s.DEFAULT_CLUSTER or shutil.which(tool))
    return [] if submitted else _needs(s, "SSS_LOG_DIR")


# What each mode needs in the settings, beyond the defaults.
MODE_SETTINGS: dict[str, Callable[[settings.Settings], list[str]]] = {
    "sss": lambda s: _batch_logs(s, "sbatch") + (
        [] if s.SSS_CPU_IMAGE or s.SSS_GPU_IMAGE or s.SSS_IMAGE
        else ["SSS_CPU_IMAGE / SSS_GPU_IMAGE (or SSS_IMAGE, for both) not set"]),
    "htp": lambda s: _batch_logs(s, "sbatch"),
    "pbs_htp": lambda s: _batch_logs(s, "qsub"),
    "ssh": lambda s: _needs(s, "SSH_DEFAULT_HOST"),
    "slurm_singularity": lambda s: _needs(s, "SINGULARITY_IMAGE"),
    "local_singularity": lambda s: _needs(s, "SINGULARITY_IMAGE"),
    "local_docker": lambda s: _needs(s, "DOCKER_IMAGE"),
    "ec2": lambda s: _needs(s, "AWS_S3_PATH", "AWS_IAM_INSTANCE_PROFILE", "AWS_IMAGE_IDS"),
    "gcp": lambda s: _needs(s, "GCP_GCS_PATH"),
    "azure": lambda s: _needs(s, "AZURE_SUBSCRIPTION_ID", "AZURE_RESOURCE_GROUP",
                              "AZURE_STORAGE_PATH", "AZURE_IDENTITY", "AZURE_SUBNET_ID"),
    "aml": lambda s: [f"{key} names no file ({s[key]})" for key in ("AML_YAML", "AML_CONFIG")
                      if s[key] and not os.path.isfile(os.path.expanduser(s[key]))] or (
        [] if s.AML_YAML or s.AML_CONFIG else _needs(
            s, "AML_SUBSCRIPTION_ID", "AML_RESOURCE_GROUP", "AML_WORKSPACE", "AML_COMPUTE")),
    "ray": lambda s: _needs(s, "RAY_STORAGE_PATH") + (
        [] if s.RAY_ADDRESS or os.environ.get("RAY_ADDRESS") else ["RAY_ADDRESS is not set"]),
}


def _meaning(key: str, value: Any) -> Finding:
    if doodad.is_placeholder(value):
        return Finding("info", f"{key} = 'TODO': doodad's placeholder, read as not set")
    rule = doodad.DOODAD_KEYS.get(key)
    if isinstance(rule, doodad.Renamed):
        return Finding("ok", f"{key} (doodad) -> {rule.target}")
    if isinstance(rule, doodad.Extends):
        return Finding("ok", f"{key} (doodad) -> added to {rule.target}")
    if isinstance(rule, doodad.Spread):
        return Finding("ok", f"{key} (doodad) -> {', '.join(rule.targets.values())}")
    if isinstance(rule, doodad.NotNeeded):
        return Finding("info", f"{key}: not needed ({rule.why})")
    if key in settings.DEFAULTS:
        return Finding("ok", f"{key}")
    return Finding("warn", f"{key}: unknown setting, ignored"
                   + did_you_mean(key, [*settings.DEFAULTS, *doodad.DOODAD_KEYS]))


def _slurm_configs(s: settings.Settings) -> Iterator[Finding]:
    for name, cfg in s.SLURM_CONFIGS.items():
        todo = [k for k, v in cfg.items() if doodad.is_placeholder(v)]
        if todo:
            yield Finding("warn", f"SLURM_CONFIGS[{name!r}]: {', '.join(todo)} still 'TODO'")
        try:
            slurm.resolve_resources(s.SLURM_CONFIGS, name, cfg.get("n_gpus", 0) > 0)
        except EasyLaunchError as exc:
            if "time_in_mins" in str(exc) and cfg.get("time_in_mins") is None:
                yield Finding("info", f"SLURM_CONFIGS[{name!r}] has no time_in_mins: pass "
                                      "time_in_mins= at each launch (as doodad required)")
            elif cfg == settings.DEFAULTS["SLURM_CONFIGS"].get(name):  # (as `init` wrote it)
                yield Finding("warn", f"{exc} (the template's entry: fill it in before "
                                      "launching on Slurm)")
            else:
                yield Finding("error", str(exc))


def _pbs_configs(s: settings.Settings) -> Iterator[Finding]:
    for name in s.PBS_CONFIGS:
        try:
            pbs.resolve_resources(s.PBS_CONFIGS, name, False)
        except EasyLaunchError as exc:
            yield Finding("error", str(exc))


SSS_IMAGES = {"SSS_GPU_IMAGE": "GPU", "SSS_CPU_IMAGE": "CPU"}  # image setting -> its runs


def _sss_image(s: settings.Settings) -> Iterator[Finding]:
    """Which runs of sss and htp doodad's SSS_IMAGE serves (those whose own image is unset)."""
    if not s.SSS_IMAGE:
        return
    unset = [key for key in SSS_IMAGES if not s[key]]
    if not unset:
        yield Finding("info", "SSS_IMAGE is not used: SSS_GPU_IMAGE and SSS_CPU_IMAGE are set")
        return
    runs = "both GPU and CPU" if len(unset) == 2 else SSS_IMAGES[unset[0]]
    yield Finding("info", f"SSS_IMAGE {s.SSS_IMAGE} is used for {runs} runs of sss and htp "
                          f"({' and '.join(unset)} {'are' if len(unset) == 2 else 'is'} unset)")


def _singularity_image(s: settings.Settings) -> Iterator[Finding]:
    """Run the image's Python through spython's client: it must match this minor version."""
    image = s.SINGULARITY_IMAGE
    if not image or not Path(image).exists() or not shutil.which("singularity"):
        return
    try:
        client = needed("spython.main", "checking SINGULARITY_IMAGE", "singularity",
                        "spython").Client
    except MissingExtra as exc:
        yield Finding("info", str(exc))
        return
    probe = "import sys, cloudpickle; print('%d.%d' % sys.version_info[:2])"
    out = client.execute(image, [s.SINGULARITY_PYTHON, "-c", probe], return_result=True,
                         quiet=True)
    found = str(out.get("message", "")).strip().splitlines()[-1:] or [""]
    if out.get("return_code") != 0:
        yield Finding("error", f"SINGULARITY_IMAGE {image}: {s.SINGULARITY_PYTHON} with "
                               f"cloudpickle does not run there: {out.get('message')!r}")
    elif found[0] != python_minor():
        yield Finding("error", f"SINGULARITY_IMAGE {image} has Python {found[0]}, this machine "
                               f"{python_minor()}: pickled functions load only on the same one")
    else:
        yield Finding("ok", f"SINGULARITY_IMAGE {image} runs Python {found[0]} with cloudpickle")


def diagnose(path: str | Path | None) -> list[Finding]:
    """Everything ``easylaunch doctor`` says about the settings file at ``path``."""
    found = settings.find_config_path(path)
    if found is None:  # (the defaults are checked as a file's values would be)
        findings = [Finding("info", "no settings file found: every setting is its default "
                                    "(`easylaunch init` writes one)")]
        effective = settings.load_settings({})
    else:
        findings = [Finding("info", f"settings file: {found}")]
        try:
            raw = settings.read_settings_file(found)
            findings += [_meaning(k, v) for k, v in raw.items() if k.isupper()
                         and not k.startswith("_")]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # unknown keys are reported above
                effective = settings.load_settings(found)
        except SettingsError as exc:
            return [*findings, Finding("error", str(exc))]
    findings += list(_slurm_configs(effective)) + list(_pbs_configs(effective))
    for mode, check in MODE_SETTINGS.items():
        missing = check(effective)
        findings.append(Finding("warn", f"mode {mode}: {'; '.join(missing)}") if missing
                        else Finding("ok", f"mode {mode}: settings complete"))
    for mode, groups in mode_commands().items():
        absent = [" or ".join(g) for g in groups if not any(map(shutil.which, g))]
        findings.append(Finding("warn", f"mode {mode}: not on PATH: {', '.join(absent)}")
                        if absent else Finding("ok", f"mode {mode}: commands on PATH"))
    findings += [Finding("info", f"modes sss, htp: runs import the cluster's copy {m.local_dir} "
                         f"(SSS_CODE_DIRS_TO_MOUNT) instead of a snapshot of {local}, the same "
                         "folder name")
                 for local, m in effective.cluster_copies().items()]
    return findings + list(_sss_image(effective)) + list(_singularity_image(effective))

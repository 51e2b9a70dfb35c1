"""SLURM_CONFIGS and PBS_CONFIGS entries as a settings file writes them: the fields an entry
leaves out come from the template's entry of that name (else its "gpu" entry for one asking for
GPUs, its "cpu" entry otherwise), and every field it writes is checked, the message naming the
entry and field as written (``SLURM_CONFIGS["cpu"]["time_in_mins"] = -3 in FILE: must be
...``). What needs several fields together (a GPU entry's partition, use_gpu) is checked at
launch, where a launch's own options (``partition=``, ``time_in_mins=``) have joined them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from easylaunch.errors import LaunchError, SettingsError, did_you_mean, is_count
from easylaunch.settings.doodad_names import is_placeholder

Check = tuple[Callable[[Any], bool], str]  # (test, what the value must be)
LAUNCH_SOURCE = "the settings with this launch's options"  # (where a launch's entry comes from)
GPU_FIELDS = {"SLURM_CONFIGS": "n_gpus", "PBS_CONFIGS": "ngpus"}


# -- the forms of the values, shared with the schedulers that write them into scripts --------

# Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
TIME_PATTERN = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
MEM_PATTERN = r"(\d+)\s*([KMGTkmgt]?)[Bb]?"  # --mem amounts: 16000, "16G", doodad's "8Gb"
GPU_STRING_PATTERN = r":?[A-Za-z0-9_.-]*"  # a gres GPU type, as doodad's ":TITAN"
WORD = re.compile(r"[A-Za-z0-9_.:@/+=,-]+")  # a value that goes into a #PBS line as it is


def slurm_seconds(text: str) -> int | None:
    """One of Slurm's time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds (None:
    not one, as sinfo's ``infinite``)."""
    match = TIME_PATTERN.fullmatch(text.strip())
    if not match:
        return None
    days, first, second, third = (int(g) if g else None for g in match.groups())
    assert first is not None  # (the pattern's one group that is not optional)
    if days is not None:
        return ((days * 24 + first) * 60 + (second or 0)) * 60 + (third or 0)
    if third is not None:
        assert second is not None  # (the third number matches only after a second)
        return (first * 60 + second) * 60 + third
    return first * 60 + (second or 0)


def time_minutes(value: object, what: str) -> int:
    """Minutes from an int or one of Slurm's --time forms ("90", "1:30:00", "2-00:00:00"),
    rounded up to whole minutes."""
    if isinstance(value, int) and not isinstance(value, bool):
        minutes = value
    elif isinstance(value, str) and (seconds := slurm_seconds(value)) is not None:
        minutes = -(-seconds // 60)
    else:
        minutes = None
    if minutes is None or minutes <= 0:
        raise LaunchError(f"{what} must be a positive number of minutes or a Slurm time such as "
                          f"\"1:30:00\" or \"2-00:00:00\", got {value!r}")
    return minutes


def walltime_seconds(value: object, what: str) -> int:
    """Seconds from minutes (an int) or PBS's ``[[hours:]minutes:]seconds`` text."""
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value * 60
    elif isinstance(value, str) and re.fullmatch(r"\d+(:\d+){0,2}", value.strip()):
        seconds = 0
        for part in value.strip().split(":"):
            seconds = seconds * 60 + int(part)
    else:
        seconds = 0
    if seconds <= 0:
        raise LaunchError(f"{what} must be a positive number of minutes or a PBS walltime such "
                          f"as \"01:30:00\", got {value!r}")
    return seconds


def _none_or_more(value: Any) -> bool:
    """A whole number of 0 or more (as :func:`~easylaunch.errors.is_count`, with 0)."""
    return is_count(value) or (type(value) is int and value == 0)


def _or_none(check: Check) -> Check:
    test, must = check
    return (lambda v: v is None or test(v)), f"{must}, or None"


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _parses(parse: Callable[[Any, str], int]) -> Callable[[Any], bool]:
    """A test by one of the parsers above (the same ones a launch uses)."""
    def test(value: Any) -> bool:
        try:
            parse(value, "")
        except LaunchError:
            return False
        return True
    return test


def _slurm_checks() -> dict[str, Check]:
    count = (is_count, "a whole number, 1 or more")
    return {
        "account_name": _or_none((_text, "a string")), "partition": _or_none((_text, "a string")),
        "qos": _or_none((_text, "a string")), "constraint": _or_none((_text, "a string")),
        "n_gpus": (_none_or_more, "a whole number, 0 or more"), "n_cpus_per_task": count,
        "max_num_cores_per_node": _or_none(count), "n_nodes": _or_none(count),
        "time_in_mins": _or_none((_parses(time_minutes), "a positive number of minutes "
                                  "or a Slurm time such as \"1:30:00\" or \"2-00:00:00\"")),
        "mem": _or_none((lambda v: isinstance(v, int | str) and bool(
            re.fullmatch(MEM_PATTERN, str(v))), "an amount sbatch reads (16000, \"16G\")")),
        "gpu_string": _or_none((lambda v: _text(v) and bool(re.fullmatch(
            GPU_STRING_PATTERN, v)), "a GPU type as doodad's (\":TITAN\")")),
        "extra_flags": _or_none((_text, "a string of sbatch options")),
    }


def _pbs_checks() -> dict[str, Check]:
    count = (is_count, "a whole number, 1 or more")
    word = _or_none((lambda v: _text(v) and bool(WORD.fullmatch(v)),
                     "one word of letters, digits and _.:@/+=,- (it goes into a #PBS line)"))
    return {
        "select": count, "ncpus": count, "ngpus": (_none_or_more, "a whole number, 0 or more"),
        "mpiprocs": count, "depth": count, "cpu_bind": word, "mem": word, "queue": word,
        "project": word, "filesystems": word, "place": word,
        "walltime": (_parses(walltime_seconds), "a positive number of minutes or a PBS "
                     "walltime such as \"01:30:00\""),
        "directives": _or_none((lambda v: isinstance(v, list | tuple) and all(
            _text(d) and d.strip().startswith("-") and "\n" not in d for d in v),
            "a list of qsub options, one per #PBS line (e.g. [\"-m n\"])")),
    }


CHECKS: dict[str, Callable[[], dict[str, Check]]] = {"SLURM_CONFIGS": _slurm_checks,
                                                     "PBS_CONFIGS": _pbs_checks}


def _template_entry(key: str, name: str, entry: Mapping, defaults: Mapping) -> Mapping:
    if name in defaults:
        return defaults[name]
    gpus = entry.get(GPU_FIELDS[key])
    return defaults["gpu" if isinstance(gpus, int) and gpus > 0 else "cpu"]


def check_entry(key: str, name: str, entry: Mapping, source: str,
                at_launch: bool = False) -> None:
    """Each field ``entry`` writes (``key``'s entry ``name``, as ``source`` has it): an
    unknown field, or a value of the wrong form, refused, naming the entry, the field and what
    it must be. The one place a scheduler entry's fields are checked: as the settings file
    loads (SettingsError; doodad's "TODO" passes, for ``doctor`` to point at), and at launch
    with the launch's own options joined (LaunchError; "TODO" is refused)."""
    checks = CHECKS[key]()
    where = f"{key}[{json.dumps(name)}]"
    error = LaunchError if at_launch else SettingsError
    for field, value in entry.items():
        if field not in checks:
            raise error(f"{where} in {source}: unknown field {field!r}"
                        + did_you_mean(field, checks) + f" (fields: {', '.join(checks)})")
        test, must = checks[field]
        if is_placeholder(value) and at_launch:
            raise error(f"{where}[{json.dumps(field)}] = {value!r} in {source}: doodad's "
                        "placeholder: set it, or leave the field out")
        if not test(value) and not is_placeholder(value):
            raise error(f"{where}[{json.dumps(field)}] = {value!r} in {source}: must be {must}")


def filled(key: str, configs: Mapping[str, Mapping], defaults: Mapping[str, Mapping],
           source: str) -> dict[str, dict]:
    """``configs`` (SLURM_CONFIGS or PBS_CONFIGS as written in ``source``) with each entry's
    written fields checked and the fields it leaves out taken from the template's entry."""
    out = {}
    for name, entry in configs.items():
        check_entry(key, name, entry, source)
        out[name] = {**_template_entry(key, name, entry, defaults), **entry}
    return out

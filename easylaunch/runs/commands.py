"""Commands as runs, the launching side's checks: each run's command, its program found
before anything is made, and how many processes a run starts.

A command travels as the run's function (:class:`easylaunch_job.command.Command`), so it gets
everything a function run gets in every mode: the code snapshot (its working directory: the
snapshot of the first of CODE_DIRS_TO_MOUNT), data mounts, GPU pinning, logs, the registry,
restarts and the dashboard. Its exit code decides the run.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from easylaunch.errors import LaunchError, check_count
from easylaunch.runs.record import LaunchRequest
from easylaunch_job.command import Command, argv_for

CommandLike = str | Sequence[str]
COMMAND_KEY = "command"  # the variant key of each run's command in a list of commands


def as_argv(command: Any) -> list[str]:
    """A command as an argument list: a string is split as a shell would (no shell runs it),
    a list is taken as it is."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise LaunchError(f"cannot split the command {command!r}: {exc}; pass a list of "
                              "arguments instead") from None
    elif isinstance(command, Sequence) and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise LaunchError(f"a command is a string or a list of strings, got {command!r}")
    if not argv or not argv[0]:
        raise LaunchError("the command is empty: give the program to run and its arguments, "
                          "e.g. ['python', 'train.py']")
    return argv


def command_of(command: Any, variants: Sequence[Mapping | None], fill: bool) -> Command:
    """The payload of a launch of ``command`` (each ``{name}`` filled from the variant when
    ``fill``), once every run's command is known to be complete."""
    template = as_argv(command)
    payload = Command(template, fill)
    for i, variant in enumerate(variants):
        try:
            # (argv_for only format_maps it, which takes any Mapping; it is annotated dict)
            argv = argv_for(template, variant, fill)
        except KeyError as exc:
            raise LaunchError(
                f"the command names {{{exc.args[0]}}}, which variants[{i}] lacks (it has "
                f"{', '.join(sorted(variant or {})) or 'no keys'}); write {{{{ and }}}} for a "
                "literal brace") from None
        except (ValueError, IndexError, AttributeError) as exc:
            raise LaunchError(f"cannot fill the command from variants[{i}]: {exc}; write "
                              "{{ and }} for a literal brace") from None
        if not argv[0]:
            raise LaunchError(f"variants[{i}] makes the command's program empty")
    return payload


def run_argvs(request: LaunchRequest) -> list[list[str]]:
    """Each run's command (none for a function launch)."""
    payload = request.method_call
    if not isinstance(payload, Command):
        return []
    return [payload.argv(v) for v in request.variants]


def programs_to_find(request: LaunchRequest) -> list[str]:
    """The programs the runs' commands name by name (looked up on the target's PATH)."""
    return sorted({argv[0] for argv in run_argvs(request) if "/" not in argv[0]})


def working_folder(code_dir: str | None) -> str:
    """The folder a command runs in (its snapshot there): the first code folder, else the
    folder it is launched from."""
    return code_dir or os.getcwd()


def check_code_programs(request: LaunchRequest, code_dir: str | None) -> None:
    """A command's program given as a path inside the code folder (``./train.sh``,
    ``bin/tool``) must be there and executable: the snapshot is made from it."""
    for argv in run_argvs(request):
        program = argv[0]
        if "/" not in program or os.path.isabs(program):
            continue
        where = working_folder(code_dir)
        path = os.path.normpath(os.path.join(where, program))
        if not os.path.isfile(path):
            raise LaunchError(f"the command's program {program!r} is not in {where}, where "
                              "commands run (the snapshot of the first of CODE_DIRS_TO_MOUNT)")
        if not os.access(path, os.X_OK):
            raise LaunchError(f"the command's program {path} is not executable: chmod +x it, "
                              f"or run it through its interpreter (bash {program}, "
                              f"python {program})")


def check_found(found: Mapping[str, str | None], where: str) -> None:
    """Refuse programs that are not on the target's PATH (``found``: name -> path or None)."""
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise LaunchError(f"the command's program {missing[0]!r} is not on PATH on {where}; "
                          "give its full path, or install it there")


def check_here(request: LaunchRequest) -> None:
    """A command that runs on this machine, outside any container: its program is on PATH."""
    check_found({name: shutil.which(name) for name in programs_to_find(request)},
                "this machine")


def multi_process_options(mode: str, accepted: Mapping[str, Any], n: int | None,
                          multi_process: bool | None, use_gpu: bool, nodes: int | None
                          ) -> dict[str, Any]:
    """The mode options of ``-n N`` / ``n_gpus=N`` and ``multi_process`` (the seed's
    settings): N GPUs per node with use_gpu; one process per GPU (or, without GPUs, N
    processes per node) with multi_process, one per node without it."""
    if "tasks_per_node" not in accepted:
        raise LaunchError(
            f"mode {mode!r} takes no GPU or process counts: it starts one process per run "
            "(with use_gpu, on one GPU); counts work in the scheduler modes (slurm, "
            "slurm_singularity, pbs); here start several processes from the command itself "
            "(torchrun --nproc-per-node=N train.py)")
    if n is not None:
        check_count("the process (GPU) count", n)
    if n is not None and not use_gpu and not multi_process:
        raise LaunchError(f"-n {n} without GPUs asks for {n} processes: add --multi-process "
                          "(or --gpu for GPUs)")
    options: dict[str, Any] = {"n_nodes": nodes} if nodes is not None else {}
    if use_gpu and n is not None:
        options["n_gpus"] = n
    options["tasks_per_node"] = (n or 1) if multi_process else 1
    return options

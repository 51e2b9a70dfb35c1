"""Commands as runs: ``run_commands`` (a sweep of commands) and ``run_command`` (one), launched
as :func:`~easylaunch.api.launch.run_sweep` launches functions."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from easylaunch.api.launch import launch_variants
from easylaunch.api.options import launch_options
from easylaunch.errors import LaunchError
from easylaunch.runs.commands import COMMAND_KEY, CommandLike, as_argv, command_of
from easylaunch.runs.preview import Preview
from easylaunch.tracking.jobs import Job
from easylaunch_job.command import Command


def run_commands(commands: CommandLike | Iterable[CommandLike],
                 variants: Iterable[Mapping | None] | None = None,
                 exp_name: str = "default", mode: str = "local", **launch: Any
                 ) -> list[Job] | Preview:
    """Launch a sweep of commands, in one go where the mode can: one command with ``{name}``
    fields and ``variants`` to fill them (``"python train.py --lr {lr}"``), or a list of
    commands. ``launch`` takes :func:`easylaunch.run_sweep`'s keywords (``n_gpus`` and
    ``multi_process`` included).

    Args:
        commands: ``"python train.py --lr {lr}"`` with ``variants``, or a list of commands.
            A command is a string (split as a shell would, none runs it) or a list of
            arguments.
        variants: Values for the command's ``{name}`` fields, one run each (None:
            ``commands`` is a list, one run a command).
        exp_name: The experiment's name, used as a folder name: letters, digits and ``. _ + -``.
        mode: Where the runs go: ``"local"``, ``"slurm"``, ``"ec2"``... Each has a page
            under Modes.
        **launch: :func:`run_sweep`'s other keywords (``use_gpu``, ``config``, ``dry_run``,
            ``sweep``, ``resume``, ``max_restarts``...) and the mode's options.

    Returns:
        The runs' Jobs, in order; with ``dry_run``, a Preview instead.

    Raises:
        LaunchError: The launch is refused (an empty list, a ``{name}`` a variant lacks, a
            mode option); nothing is started.
    """
    if variants is not None:
        variants = [v or {} for v in variants]
        payload = command_of(commands, variants, fill=True)
    else:
        if isinstance(commands, str) or not isinstance(commands, Iterable):
            raise LaunchError("run_commands takes a list of commands, or one command with "
                              "variants=; for one command use run_command")
        variants = [{COMMAND_KEY: shlex.join(as_argv(c))} for c in commands]
        if not variants:
            raise LaunchError("commands is empty: nothing to launch")
        payload = Command([], from_variant=COMMAND_KEY)
    return launch_variants(payload, variants, launch_options(exp_name, mode, launch), sweep_id=None)


def run_command(command: CommandLike, exp_name: str = "default", mode: str = "local",
                variant: Mapping | None = None, **launch: Any) -> Job | Preview:
    """Launch one command as a run (``variant``: values for its ``{name}`` fields, kept with
    the run). ``launch`` takes :func:`easylaunch.run_experiment`'s keywords.

    Args:
        command: ``"python train.py --lr {lr}"``, or a list of arguments. A string is split as
            a shell would; no shell runs it.
        exp_name: The experiment's name, used as a folder name: letters, digits and ``. _ + -``.
        mode: Where the run goes: ``"local"``, ``"slurm"``, ``"ec2"``... Each has a page
            under Modes.
        variant: Values for the command's ``{name}`` fields, kept with the run (None: the
            command as written).
        **launch: :func:`run_experiment`'s other keywords (``use_gpu``, ``config``,
            ``dry_run``, ``sweep``, ``resume``...) and the mode's options.

    Returns:
        The run's Job; with ``dry_run``, a Preview instead.

    Raises:
        LaunchError: The launch is refused (an empty command, a ``{name}`` the variant lacks,
            a mode option); nothing is started.
    """
    payload = command_of(command, [variant], fill=variant is not None)
    launched = launch_variants(payload, [variant], launch_options(exp_name, mode, launch),
                               sweep_id="script")
    return launched if isinstance(launched, Preview) else launched[0]

"""``run_experiment`` and ``run_sweep``: validate, bundle, hand over to the mode.

Every check that can fail happens before the first run folder is made, so bad input never
leaves anything behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from easylaunch.api.options import (
    LaunchOptions,
    check_exp_name,
    checked_variants,
    mode_for,
    registry_of,
    script_name,
)
from easylaunch.api.resume import resumed
from easylaunch.api.starting import Launch, payloads, started
from easylaunch.runs.bundle import (
    new_run_id,
)
from easylaunch.runs.commands import (
    check_code_programs,
)
from easylaunch.runs.preview import Preview, dry_run_by_default
from easylaunch.runs.process import SESSION
from easylaunch.runs.rebuild import (
    refuse_launches_while_importing,
)
from easylaunch.runs.record import LaunchRequest
from easylaunch.runs.variants import warn_text_values
from easylaunch.settings import ConfigArg, load_settings
from easylaunch.tracking.jobs import Job


def run_sweep(
    method_call: Callable[..., Any],
    variants: Iterable[Mapping | None],
    exp_name: str = "default",
    mode: str = "local",
    prepend_date_to_exp_name: bool = True,
    use_gpu: bool = False,
    gpu_id: int | str | None = None,
    base_log_dir: str | os.PathLike | None = None,
    slurm_config_name: str | None = None,
    config: ConfigArg = None,
    max_restarts: int | None = None,
    restart_on_error: bool | None = None,
    dry_run: bool | None = None,
    sweep: str | None = None,
    resume: bool | str = False,
    trackers: list[str] | None = None,
    **mode_options: Any,
) -> list[Job] | Preview:
    """Launch ``method_call(doodad_config, variant)`` once per variant; return their Jobs.

    Modes that can, turn the whole sweep into one submission. ``config`` is a settings file
    path or a dict of settings; ``mode_options`` go to the mode (``max_parallel`` for local).
    ``max_restarts`` and ``restart_on_error`` replace the MAX_RESTARTS and RESTART_ON_ERROR
    settings for this launch (see ``easylaunch.checkpoint``); ``trackers=["wandb"]`` the
    TRACKERS setting (each run's ``log_metrics`` also sent to W&B, MLflow or TensorBoard, in a
    tracker run that is the easylaunch run).
    doodad's keywords work as doodad's did: ``region=`` sets AWS_REGION in ec2, one that doodad
    ignored in a mode (``time_in_mins`` in ec2) is ignored with a notice.
    The runs make one sweep (``easylaunch ls`` groups them; ``--sweep`` selects them).
    ``dry_run=True`` (or ``easylaunch preview SCRIPT``) checks the launch and prints and
    returns a :class:`~easylaunch.runs.preview.Preview` of what it would write and run, instead of
    launching anything.

    ``sweep="lr-grid"`` names the sweep (its id is then that name; by default each call makes a
    new sweep with a generated id). ``resume=True`` launches only the variants that have not
    succeeded in the sweep: the named one, else the newest sweep of this experiment and mode
    that this script launched with this function (a new one if there is none); ``resume="ID"``
    names a sweep by its id or a unique start of one. Variants are matched to the sweep's runs
    by content (key order aside; ``1`` and ``1.0`` differ; values JSON cannot hold, by their
    text), each run to one variant: a variant that succeeded, or is still queued or running,
    keeps its run (its Job is returned, nothing is launched for it); every other one (failed,
    cancelled, timed out, lost, never launched) is launched again as a new run of the same
    sweep, ``resubmitted_from`` its last run. A variant listed k times keeps at most k runs.
    The Jobs come in the variants' order. Resumes of one sweep take turns (a lock beside the
    registry), so two at once never launch the same variant twice.

    Args:
        method_call: The function each run calls, as ``method_call(doodad_config, variant)``.
        variants: The variants, one run each: dicts (None is an empty one).
        exp_name: The experiment's name, used as a folder name: letters, digits and ``. _ + -``.
        mode: Where the runs go: ``"local"``, ``"slurm"``, ``"ec2"``... Each has a page
            under Modes.
        prepend_date_to_exp_name: Date each run folder's name and ``doodad_config.exp_name``.
        use_gpu: Give each run a GPU.
        gpu_id: The GPU to use: ``local`` and ``ssh`` pin every run to it.
        base_log_dir: The root of the run folders, in place of the LOCAL_LOG_DIR setting.
        slurm_config_name: The SLURM_CONFIGS entry to use (else ``"gpu"`` with ``use_gpu``,
            else ``"cpu"``).
        config: A settings file's path, or a dict of settings (None: the usual lookup).
        max_restarts: How many times a run may start again; replaces MAX_RESTARTS.
        restart_on_error: Also restart a run whose function raised; replaces RESTART_ON_ERROR.
        dry_run: True checks the launch and returns a Preview instead of launching (None:
            only under ``easylaunch preview``).
        sweep: ``"lr-grid"`` names the sweep (None: a new sweep with a generated id).
        resume: True launches only the variants that have not succeeded; ``"ID"`` names the
            sweep.
        trackers: ``["wandb"]``: where each run's ``log_metrics`` also goes; replaces TRACKERS.
        **mode_options: The mode's own options (the table below). doodad's keywords
            (``region``, ``instance_type``, ``spot_price``, ``sync_interval``,
            ``docker_image``, ``ssh_host``) set their settings where doodad's did. Elsewhere
            they are ignored with a notice; an unknown name is refused.

    Keyword Args:
        max_parallel (int): ``local``, ``ssh``: at most this many runs at once (default: one
            a GPU with ``use_gpu``, else one a CPU core).
        detach (bool): ``local``: True lets the runs outlive this process (default:
            LOCAL_DETACH).
        skip_wait (bool): ``local``: False blocks each call until its runs end, as doodad's
            did.
        pool (str): ``local``: the warm pool, by name, that takes the runs.
        cluster (str): The CLUSTERS entry reached over SSH: for ``ssh``, the Slurm and PBS
            modes, and ``local`` with ``pool``.
        n_gpus (int): ``slurm``, ``slurm_singularity``, ``sss``, ``pbs``: GPUs of each run
            on each node.
        multi_process (bool): Those modes: True starts ``n_gpus`` processes a node (one a
            GPU with ``use_gpu``); False, one a node.
        n_nodes (int): Those modes: nodes of each run. ``htp``: nodes of each allocation.
        tasks_per_node (int): Those modes: processes of each run on each node (default: one
            a GPU, else one).
        time_in_mins (int): Slurm and PBS modes: each job's time limit, in minutes.
        partition (str): Slurm modes: replaces the SLURM_CONFIGS entry's ``partition``.
        mem (str): Slurm modes: replaces the entry's ``mem`` (``"16G"``).
        account (str): Slurm modes: replaces the entry's ``account_name``.
        qos (str): Slurm modes: replaces the entry's ``qos``.
        constraint (str): Slurm modes: replaces the entry's ``constraint``.
        n_cpus_per_task (int): Slurm modes: replaces the entry's ``n_cpus_per_task``.
        array_parallelism (int): ``slurm``, ``slurm_singularity``, ``pbs``: at most this
            many of the sweep's array tasks at once.
        submit (bool): ``sss``, ``htp``, ``pbs_htp``: False writes the batch to copy by hand
            (default: SSS_SUBMIT, else submit where the scheduler answers).
        allocations (int): ``htp``, ``pbs_htp``: spread the sweep over this many
            allocations.
        env_pack (bool | str): ``slurm``, ``pbs``: True packs this Python's environment, a
            path packs that one; each node gets a copy.
        pbs_config_name (str): PBS modes: the PBS_CONFIGS entry to use (else ``"gpu"`` with
            ``use_gpu``, else ``"cpu"``).
        queue (str): PBS modes: replaces the PBS_CONFIGS entry's ``queue``.
        project (str): PBS modes: replaces the entry's ``project`` (``-A``).
        num_exps_per_instance (int): ``ec2``, ``gcp``, ``azure``, ``aml``, ``ray``: runs an
            instance or job shares (default: the mode's setting).
        confirm (bool): ``ec2``, ``gcp``, ``azure``: False skips the question asked before
            paid instances start.
        gcp_kwargs (dict): ``gcp``: ``GCP_`` settings by their lowercase names
            (``dict(zone=..., preemptible=True)``).
        compute (str): ``aml``: the compute target, in place of AML_COMPUTE.
        num_gpus (int): ``aml``: GPUs of each run, in whole nodes. ``ray``: GPUs a job asks
            for.
        num_cpus (float): ``ray``: CPUs a job asks for, in place of RAY_NUM_CPUS.
        address (str): ``ray``: the cluster's dashboard address, in place of RAY_ADDRESS.
        check_resources (bool): ``ray``: False skips the check that a node can hold a job.

    Returns:
        The runs' Jobs, in the variants' order; with ``dry_run``, a Preview instead.

    Raises:
        LaunchError: The launch is refused (a name, a variant, a mode option); nothing is
            started.
        SettingsError: A settings file or value is wrong.
    """
    return launch_variants(method_call, variants, LaunchOptions(
        exp_name=exp_name, mode=mode, prepend_date_to_exp_name=prepend_date_to_exp_name,
        use_gpu=use_gpu, gpu_id=gpu_id, base_log_dir=base_log_dir,
        slurm_config_name=slurm_config_name, config=config, max_restarts=max_restarts,
        restart_on_error=restart_on_error, dry_run=dry_run, mode_options=mode_options,
        sweep=sweep, resume=resume, trackers=trackers), sweep_id=None)


def launch_variants(method_call: Callable[..., Any], variants: Iterable[Mapping | None],
            opts: LaunchOptions, sweep_id: str | None, again: tuple[dict, ...] = ()
            ) -> list[Job] | Preview:
    """:func:`run_sweep`, in the sweep ``sweep_id`` (None: a new one, this launch's;
    "script": the one this process's earlier single launches of the experiment made);
    ``again``: launch.json fields of each run (a search's trial, a rerun's origin)."""
    if opts.resume:
        return resumed(launch_variants, method_call, variants, opts, script=sweep_id == "script")
    if opts.sweep is not None:
        sweep_id = check_exp_name(opts.sweep, "sweep")
    refuse_launches_while_importing()
    settings, mode_obj, mode_options = mode_for(opts)
    dry_run = dry_run_by_default() if opts.dry_run is None else opts.dry_run
    # (a broken registry fails here, before anything is made)
    registry = None if dry_run else registry_of(settings)
    checked = checked_variants(method_call, variants, opts.use_gpu)
    root = Path(os.path.expanduser(os.fspath(opts.base_log_dir or settings.LOCAL_LOG_DIR))
                ).resolve()
    launch_id = new_run_id()
    if sweep_id == "script" and opts.sweep is None:  # (a dry run joins no sweep of this process)
        sweep_id = launch_id if dry_run else \
            SESSION.sweep_of(opts.exp_name, opts.mode, str(root), launch_id)
    request = LaunchRequest(
        method_call=method_call, variants=checked, exp_name=check_exp_name(opts.exp_name),
        use_gpu=opts.use_gpu, gpu_id=opts.gpu_id, log_root=root,
        slurm_config_name=opts.slurm_config_name, script_name=script_name())
    code_mounts = settings.code_mounts()
    settings.data_mounts()  # checked here for every mode; modes that mount them read them again
    check_code_programs(request, code_mounts[0].local_dir if code_mounts else None)
    function_bytes, variant_bytes = payloads(mode_obj, method_call, checked, settings)
    warn_text_values(checked)
    return started(Launch(opts, settings, mode_obj, mode_options, request, launch_id,
                            sweep_id or launch_id, function_bytes, variant_bytes, None, again),
                    registry)


def run_experiment(
    method_call: Callable[..., Any],
    mode: str = "local",
    exp_name: str = "default",
    variant: Mapping | None = None,
    prepend_date_to_exp_name: bool = True,
    use_gpu: bool = False,
    gpu_id: int | str | None = None,
    base_log_dir: str | os.PathLike | None = None,
    slurm_config_name: str | None = None,
    config: ConfigArg = None,
    max_restarts: int | None = None,
    restart_on_error: bool | None = None,
    dry_run: bool | None = None,
    sweep: str | None = None,
    resume: bool | str = False,
    trackers: list[str] | None = None,
    **mode_options: Any,
) -> Job | Preview:
    """Launch ``method_call(doodad_config, variant)`` once; same arguments as doodad's, and
    ``max_restarts``/``restart_on_error``/``dry_run`` as in :func:`run_sweep`. A script's
    launches of one experiment in one mode make one sweep; ``sweep="lr-grid"`` names it, so
    launches from several processes (or runs of the script) join the same one.

    With ``resume`` (as in :func:`run_sweep`), a script's loop of calls resumes the sweep one
    variant at a time: each call returns the Job of a run of the sweep with this variant that
    succeeded or is under way, one this process has not returned before, and launches the
    variant again only if there is none. The sweep is the one named (``sweep=``), else the one
    the process's first call found: the newest this script launched with this function.

    Args:
        method_call: The function the run calls, as ``method_call(doodad_config, variant)``.
        mode: Where the run goes: ``"local"``, ``"slurm"``, ``"ec2"``... Each has a page
            under Modes.
        exp_name: The experiment's name, used as a folder name: letters, digits and ``. _ + -``.
        variant: The dict the function gets as its second argument (None: an empty one).
        prepend_date_to_exp_name: Date the run folder's name and ``doodad_config.exp_name``.
        use_gpu: Give the run a GPU.
        gpu_id: The GPU to use: ``local`` and ``ssh`` pin the run to it.
        base_log_dir: The root of the run folders, in place of the LOCAL_LOG_DIR setting.
        slurm_config_name: The SLURM_CONFIGS entry to use (else ``"gpu"`` with ``use_gpu``,
            else ``"cpu"``).
        config: A settings file's path, or a dict of settings (None: the usual lookup).
        max_restarts: How many times the run may start again; replaces MAX_RESTARTS.
        restart_on_error: Also restart the run if its function raised; replaces
            RESTART_ON_ERROR.
        dry_run: True checks the launch and returns a Preview instead of launching (None:
            only under ``easylaunch preview``).
        sweep: ``"lr-grid"`` names the sweep, so launches from other processes join it.
        resume: True returns a run of the sweep with this variant that succeeded or is under
            way, launching only if none is; ``"ID"`` names the sweep.
        trackers: ``["wandb"]``: where the run's ``log_metrics`` also goes; replaces TRACKERS.
        **mode_options: The mode's own options and doodad's keywords, as for
            :func:`run_sweep` (its Other Parameters).

    Returns:
        The run's Job; with ``dry_run``, a Preview instead.

    Raises:
        LaunchError: The launch is refused (a name, the variant, a mode option); nothing is
            started.
        SettingsError: A settings file or value is wrong.
    """
    launched = launch_variants(method_call, [variant], LaunchOptions(
        exp_name=exp_name, mode=mode, prepend_date_to_exp_name=prepend_date_to_exp_name,
        use_gpu=use_gpu, gpu_id=gpu_id, base_log_dir=base_log_dir,
        slurm_config_name=slurm_config_name, config=config, max_restarts=max_restarts,
        restart_on_error=restart_on_error, dry_run=dry_run, mode_options=mode_options,
        sweep=sweep, resume=resume, trackers=trackers), sweep_id="script")
    return launched if isinstance(launched, Preview) else launched[0]


def get_job(id_or_suffix: str, config: ConfigArg = None) -> Job:
    """The Job of a registered run, by its id or a unique start or end of it, from any process.

    Args:
        id_or_suffix: A run id, or a unique start or end of one.
        config: A settings file's path, or a dict of settings: their registry is searched.

    Returns:
        A handle on the run, with the settings and mode options it was launched with.

    Raises:
        NoSuchRun: No run matches, or several do.
    """
    entry = registry_of(load_settings(config)).find(id_or_suffix)
    return Job.from_run_dir(entry.log_dir)


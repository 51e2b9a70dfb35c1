"""``run_experiment`` and ``run_sweep``: validate, bundle, hand over to the mode.

Every check that can fail happens before the first run folder is made, so bad input never
leaves anything behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from easylaunch.api.options import (
    LaunchOptions,
    check_exp_name,
    checked_variants,
    launch_options,
    mode_for,
    registry_of,
    script_name,
)
from easylaunch.api.resume import resumed
from easylaunch.errors import LaunchError
from easylaunch.modes.base import Mode
from easylaunch.modes.console import track
from easylaunch.runs.bundle import (
    BundleSpec,
    Run,
    bundle_blobs,
    create_run,
    make_store,
    mark_submitted,
    new_run_id,
)
from easylaunch.runs.commands import (
    COMMAND_KEY,
    CommandLike,
    as_argv,
    check_code_programs,
    command_of,
    working_folder,
)
from easylaunch.runs.gitinfo import git_infos
from easylaunch.runs.payload import pickle_payload, warn_if_large
from easylaunch.runs.preview import PlannedRun, Preview, dry_run_by_default, show
from easylaunch.runs.rebuild import (
    KEYWORDS_SOURCE,
    function_name,
    refuse_launches_while_importing,
)
from easylaunch.runs.record import LaunchRequest, sweep_of
from easylaunch.runs.session import SESSION
from easylaunch.runs.snapshot import snapshot
from easylaunch.runs.variants import warn_text_values
from easylaunch.settings import ConfigArg, Settings, load_settings, save_settings
from easylaunch.tracking.interrupts import config_flag
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.registry import Registry
from easylaunch.tracking.rows import aborted, registry_row, settle_abandoned
from easylaunch_job.command import Command
from easylaunch_job.records import SNAPSHOT_STORE

SETTINGS_STORE = ".settings"


def _start(mode_obj: Mode, request: LaunchRequest, runs: list[Run], facts: Any,
           registry: Registry) -> list[Job]:
    """Prepare (with what the mode's check learned) and submit the runs; a failure gives the
    runs not started a terminal state."""
    try:
        jobs = [Job(record, mode_obj) for record in
                mode_obj.submit(request, runs, mode_obj.prepare(request, runs, facts))]
    except BaseException as exc:
        registry.update_many(aborted(runs, exc))
        raise
    if mode_obj.needs_bundle:  # handed over: no longer resolved as never submitted
        mark_submitted(request.log_root, runs[0].launch["launch_id"],
                       runs[0].log_dir.stat().st_mode & 0o777)
    registry.update_many(
        (job.id, {"state": job.recorded_state().value, "backend": run.launch["backend"],
                  "remote_log_dir": mode_obj.remote_log_dir(run)})
        for job, run in zip(jobs, runs, strict=True))
    if mode_obj.settings.LAUNCH_LINE and runs:
        print(launch_line(mode_obj, runs), file=sys.stderr)
    return jobs


def launch_line(mode_obj: Mode, runs: list[Run]) -> str:
    """``easylaunch local: 4 runs of lr launched; folders in F; follow: easylaunch ls ...``
    (from the runs' records as this process holds them: nothing is read again)."""
    head = f"easylaunch {mode_obj.name}: "
    flag = config_flag(mode_obj.settings.path)  # (settings a bare `easylaunch` would not read)
    if len(runs) == 1:
        run = runs[0]
        return (f"{head}run {run.run_id} of {run.exp_name} {mode_obj.launched(runs)}; folder "
                f"{run.log_dir}; follow: easylaunch logs{flag} -f {run.run_id}")
    parents = {str(run.log_dir.parent) for run in runs}
    sweep = sweep_of(runs[0].launch)
    follow = f"easylaunch ls{flag} --sweep {sweep}" if sweep else f"easylaunch ls{flag}"
    return (f"{head}{len(runs)} runs of {runs[0].exp_name} {mode_obj.launched(runs)}; folders "
            f"in {parents.pop() if len(parents) == 1 else 'their experiments'}; follow: {follow}")


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


def _payloads(mode_obj: Mode, method_call: Callable[..., Any], variants: list[dict],
              settings: Settings) -> tuple[bytes, list[bytes]]:
    """The pickled function and variants (nothing for a mode that keeps no bundle), with a
    warning for a large one."""
    if not mode_obj.needs_bundle:
        return b"", [b""] * len(variants)
    code_dirs = [m.local_dir for m in settings.code_mounts()]
    script_dir = os.path.dirname(script_name()) or None
    function_bytes = pickle_payload(method_call, "the function", code_dirs, script_dir)
    variant_bytes = [pickle_payload(v, f"variants[{i}]", code_dirs, script_dir)
                     for i, v in enumerate(variants)]
    limit = settings.LARGE_PAYLOAD_WARN_MB
    warn_if_large(method_call, len(function_bytes), "the function", limit)
    largest = max(range(len(variants)), key=lambda i: len(variant_bytes[i]))
    warn_if_large(variants[largest], len(variant_bytes[largest]), f"variants[{largest}]", limit)
    return function_bytes, variant_bytes


@dataclass(frozen=True)
class _Launch:
    """One checked launch: what its runs share, and the steps that make and start them."""

    opts: LaunchOptions
    settings: Settings
    mode: Mode
    mode_options: dict[str, Any]
    request: LaunchRequest
    launch_id: str
    sweep_id: str
    function_bytes: bytes
    variant_bytes: list[bytes]
    facts: Any  # what the mode's check learned
    again: tuple[dict, ...] = ()  # a resubmit's: launch.json fields of each run it reruns
    script_argv: list[str] | None = None  # the launching script's (None: this process's)

    def bundle_spec(self, folder: Path) -> BundleSpec:
        """What every run of this launch shares, with its stores in ``folder``."""
        o, s, request, bundles = self.opts, self.settings, self.request, self.mode.needs_bundle
        command = request.method_call if isinstance(request.method_call, Command) else None
        code_mounts = s.code_mounts()
        if bundles:
            make_store(folder / SNAPSHOT_STORE, s.RUN_FOLDER_MODE)
        snapshots = [
            snapshot(m.local_dir, folder / SNAPSHOT_STORE, s.CODE_SNAPSHOT_EXCLUDES,
                     s.CODE_SNAPSHOT_MAX_MB, skip_dirs={str(request.log_root)})
            for m in self.mode.snapshot_mounts()] if bundles else []
        return BundleSpec(
            root=folder, exp_name=request.exp_name, mode=o.mode,
            function_bytes=self.function_bytes, use_gpu=o.use_gpu, gpu_id=o.gpu_id,
            prepend_date=o.prepend_date_to_exp_name,
            git_infos=git_infos([*(m.local_dir for m in code_mounts),
                                 *filter(None, [self._origin(code_mounts)])]),
            snapshots=snapshots,
            script_name=request.script_name, write_bundle=bundles, runs_here=not bundles,
            launch_dir=os.getcwd() if self.mode.sees_this_machine() else None,
            request={"settings_file": str(save_settings(s, folder / SETTINGS_STORE)),
                     "settings_path": s.path, "keywords": {
                         k: s[k] for k, source in s.sources.items()
                         if source.startswith(KEYWORDS_SOURCE)},
                     "function": function_name(request.method_call),
                     "script_argv": self.script_argv or sys.argv,
                     "mode_options": self.mode_options, "use_gpu": o.use_gpu,
                     "gpu_id": o.gpu_id, "log_root": str(folder),
                     "slurm_config_name": o.slurm_config_name,
                     "prepend_date": o.prepend_date_to_exp_name},
            launch_id=self.launch_id, sweep_id=self.sweep_id,
            extra_launch_info=self.mode.extra_launch_info(request),
            command=command,
            restart=_restart_policy(s),
            trackers={"names": list(s.TRACKERS), "exp_name": request.exp_name,
                      "sweep": self.sweep_id} if s.TRACKERS else {},
            blobs=bundle_blobs(folder, self.function_bytes, s.RUN_FOLDER_MODE)
            if bundles else {}, folder_mode=s.RUN_FOLDER_MODE, again=self.again)

    def _origin(self, code_mounts: list) -> str:
        """The folder whose repository a run came from besides the code folders: a command's
        working folder (not where easylaunch is installed), a function's launching script's."""
        if isinstance(self.request.method_call, Command):
            return working_folder(code_mounts[0].local_dir if code_mounts else None)
        return os.path.dirname(self.request.script_name)

    def _pairs(self) -> list[tuple[dict, bytes]]:
        return list(zip(self.request.variants, self.variant_bytes, strict=True))

    def dry_run(self) -> Preview:
        """Make the runs in a folder that is gone afterwards; show what would be submitted."""
        root = str(self.request.log_root)
        with tempfile.TemporaryDirectory(prefix="easylaunch-dry-run-") as folder:
            spec = self.bundle_spec(Path(folder))
            runs = [create_run(spec, variant, data, i, register=lambda run: None)
                    for i, (variant, data) in enumerate(self._pairs())]
            staged = dataclasses.replace(self.request, log_root=Path(folder))
            shown = self.mode.preview(staged, runs, self.mode.prepare(staged, runs, self.facts))
            shown.planned = [PlannedRun(r.run_id, r.exp_name, r.log_dir, r.variant)
                             for r in runs]
        return show(shown.replace_path(folder, root))

    def start(self, registry: Registry, check: Callable[[LaunchRequest], Any] | None = None
              ) -> list[Job]:
        """Make the runs (each registered as it is made), then prepare and submit them. With
        ``check`` (the mode's, for a far host), the host is asked while the runs are made; if
        it refuses, the runs made are taken back (folders and registry rows) before the
        refusal is raised."""
        pool = pending = None
        if check is not None:
            pool = ThreadPoolExecutor(1, thread_name_prefix="easylaunch-check")
            pending = pool.submit(check, self.request)
        # (a far host: each run's copy starts as it is made, once the check reached the host)
        sink = self.mode.stream_runs(self.request, pending.done if pending else lambda: True)
        runs: list[Run] = []
        try:
            spec = self.bundle_spec(self.request.log_root)
            settle_abandoned(self.request.log_root, registry)
            for i, (variant, data) in enumerate(track(self._pairs(), "bundling runs")):
                # (each registered before its folder is in place: visible at once, should we die)
                runs.append(create_run(spec, variant, data, i,
                                       register=lambda run: registry.add([registry_row(run)])))
                sink.made(runs[-1])
        except BaseException as exc:  # the runs made so far are recorded, as never started
            sink.abort()
            registry.update_many(aborted(runs, exc))
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=False)
        try:
            facts = self.facts if pending is None else _checked(pending, runs, registry)
            return _start(self.mode, self.request, runs, facts, registry)
        finally:
            sink.abort()  # (finished by then, or no longer wanted)


def _restart_policy(settings: Settings) -> dict:
    """The runner's RestartPolicy, as bundle.json has it."""
    return {"max_restarts": settings.MAX_RESTARTS, "on_error": settings.RESTART_ON_ERROR,
            "grace_seconds": settings.CHECKPOINT_GRACE_SECONDS}


@overload
def _started(launch: _Launch, registry: Registry) -> list[Job]: ...


@overload
def _started(launch: _Launch, registry: None) -> Preview: ...


@overload
def _started(launch: _Launch, registry: Registry | None) -> list[Job] | Preview: ...


def _started(launch: _Launch, registry: Registry | None) -> list[Job] | Preview:
    """Check the launch with its mode (while the runs are made, for a far host) and start it;
    without a registry, show it as a dry run."""
    if registry is not None and launch.mode.checks_while_runs_are_made():
        return launch.start(registry, check=launch.mode.check)
    launch = dataclasses.replace(launch, facts=launch.mode.check(launch.request))
    return launch.dry_run() if registry is None else launch.start(registry)


def _checked(pending: Future, runs: list[Run], registry: Registry) -> Any:
    """What the mode's check learned; if it refused the launch, the runs made meanwhile are
    removed (folders, and rows), as if never made, and the refusal raised."""
    try:
        return pending.result()
    except BaseException:
        registry.forget([run.run_id for run in runs])
        for run in runs:
            shutil.rmtree(run.log_dir, ignore_errors=True)
        if runs:
            with contextlib.suppress(OSError):  # the experiment's folder, if now empty
                os.rmdir(runs[0].log_dir.parent)
        raise


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
    function_bytes, variant_bytes = _payloads(mode_obj, method_call, checked, settings)
    warn_text_values(checked)
    return _started(_Launch(opts, settings, mode_obj, mode_options, request, launch_id,
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


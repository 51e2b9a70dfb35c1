"""Resubmitting registered runs: again as launched (the same bundle, code snapshots and saved
settings), or with their code (``current_code``) or settings file (``current_settings``) as they
are now, as a new launch of their sweep; and ``easylaunch resume SWEEP``, which resubmits a
sweep's runs that did not succeed (:func:`resume_sweep`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easylaunch.api.options import LaunchOptions, registry_of
from easylaunch.api.starting import (
    SETTINGS_STORE,
    Launch,
    restart_policy,
    start_runs,
    started,
)
from easylaunch.errors import LaunchError
from easylaunch.modes import get_mode
from easylaunch.modes.base import Mode
from easylaunch.runs.bundle import clone_run, new_run_id
from easylaunch.runs.commands import check_code_programs
from easylaunch.runs.rebuild import current_payload, in_folder, script_argv, settings_now
from easylaunch.runs.record import VARIANT_JSON, LaunchRequest, sweep_of
from easylaunch.settings import ConfigArg, Settings, load_settings, save_settings
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.registry import Entry
from easylaunch.tracking.rows import aborted, registry_row
from easylaunch.tracking.sweeps import (
    kept,
    launch_of,
    resume_line,
    sweep_entries,
    sweep_lock,
    to_relaunch,
)
from easylaunch_job.records import BUNDLE_DIR, VARIANT_PKL, read_json


def resubmit(id_or_suffix: str, config: ConfigArg = None, detach: bool | None = None,
             current_code: bool = False, current_settings: bool = False) -> Job:
    """Run a registered run again, as a new run of its sweep: its code and settings as
    launched (the same bundle, code snapshots and saved settings), unless ``current_code``
    (its function found again by name in its launching script, imported as a module; code
    snapshots made again; a command's working folder snapshotted again) or
    ``current_settings`` (its settings file read again) takes them as they are now.
    ``detach`` (mode ``local``) replaces the run's own choice: True, the new run outlives
    this process.

    Args:
        id_or_suffix: A run id, or a unique start or end of one.
        config: A settings file's path, or a dict of settings: their registry is searched.
        detach: ``local``: True lets the new run outlive this process (None: as the run had
            it).
        current_code: Take the code as it is now, not as launched.
        current_settings: Read the run's settings file again, not the copy saved at launch.

    Returns:
        The new run's Job.

    Raises:
        NoSuchRun: No run matches, or several do.
        LaunchError: The run cannot run again as asked (its mode keeps no bundle, its saved
            settings are gone).
    """
    return resubmit_launch([id_or_suffix], config, detach, current_code, current_settings)[0]


def resubmit_launch(ids: list[str], config: ConfigArg = None, detach: bool | None = None,
                    current_code: bool = False, current_settings: bool = False) -> list[Job]:
    """Run registered runs of one launch again as one launch, each as :func:`resubmit` does:
    one job array, batch or packed allocation for them all, as the sweep had (runs of
    different launches are refused: resubmit each launch's runs together).

    Args:
        ids: Run ids, or unique starts or ends of them, all of one launch.
        config: A settings file's path, or a dict of settings: their registry is searched.
        detach: ``local``: True lets the new runs outlive this process (None: as the runs had
            it).
        current_code: Take the code as it is now, not as launched.
        current_settings: Read the runs' settings file again, not the copy saved at launch.

    Returns:
        The new runs' Jobs, in the order of ``ids``.

    Raises:
        NoSuchRun: An id matches no run, or several.
        LaunchError: The runs come from several launches, or cannot run again as asked.
    """
    registry = registry_of(load_settings(config))
    olds = [Job.from_run_dir(registry.find(id_or_suffix).log_dir) for id_or_suffix in ids]
    old = olds[0]
    launches = {job.launch_info["launch_id"] for job in olds}
    if len(launches) > 1:
        raise LaunchError(f"runs {', '.join(j.id for j in olds)} come from {len(launches)} "
                          "launches; resubmit each launch's runs together")
    if not old.mode.needs_bundle:
        raise LaunchError(f"run {old.id} ran in mode {old.mode.name!r}, which keeps no bundle to "
                          "run again; run its script again instead")
    saved = old.launch_info["request"]
    if not current_settings and not Path(saved["settings_file"]).is_file():
        raise LaunchError(f"run {old.id} cannot be resubmitted as launched: its saved settings "
                          f"{saved['settings_file']} are gone; resubmit it with the settings "
                          "file as it is now (--current-settings), or launch its script again")
    settings = settings_now(saved, config) if current_settings else old.mode.settings
    options = dict(saved.get("mode_options") or {})
    if detach is not None:
        options["detach"] = detach
    mode_obj = old.mode if detach is None and not current_settings else \
        get_mode(old.mode.name).create(settings, options)
    record = {"resubmitted_with": {
        "code": "current" if current_code else "as launched",
        "settings": (settings.path or "current") if current_settings else "as launched"}}
    if current_code:  # (where the launch ran, so relative paths mean what they meant)
        with in_folder(old.launch_info.get("cwd")):
            return started(_launch_again(olds, settings, mode_obj, options, record),
                            registry)
    changed: dict[str, Any] = {"mode_options": options}  # (launch.json's request fields)
    if current_settings:
        changed.update(settings_path=settings.path, settings_file=str(
            save_settings(settings, Path(saved["log_root"]) / SETTINGS_STORE)))
    launch_id = new_run_id()
    runs = [clone_run(job.log_dir, launch_id, lambda run: registry.add([registry_row(run)]),
                      changed, restart_policy(settings) if current_settings else None, record)
            for job in olds]
    request = LaunchRequest.of_launch(runs[0].launch, [run.variant for run in runs])
    try:
        facts = mode_obj.check(request)
    except BaseException as exc:
        registry.update_many(aborted(runs, exc))
        raise
    return start_runs(mode_obj, request, runs, facts, registry)


def _launch_again(olds: list[Job], settings: Settings, mode_obj: Mode, options: dict,
                  record: dict) -> Launch:
    """The runs ``olds`` (of one launch) as a new launch of their sweep, from their launching
    script and code folders as they are now: the same variants, experiment and mode options;
    the function found again by its name, code snapshots and git infos made again."""
    launch = olds[0].launch_info
    saved = launch["request"]
    opts = LaunchOptions(
        exp_name=launch["exp_name"], mode=launch["mode"],
        prepend_date_to_exp_name=saved["prepend_date"], use_gpu=saved["use_gpu"],
        gpu_id=saved["gpu_id"], base_log_dir=saved["log_root"],
        slurm_config_name=saved["slurm_config_name"], mode_options=options)
    code_dirs = [m.local_dir for m in settings.code_mounts()]
    function, function_bytes = current_payload(launch, code_dirs)
    request = LaunchRequest(
        method_call=function, variants=[read_json(str(j.log_dir / VARIANT_JSON)) for j in olds],
        exp_name=launch["exp_name"], use_gpu=saved["use_gpu"], gpu_id=saved["gpu_id"],
        log_root=Path(saved["log_root"]), slurm_config_name=saved["slurm_config_name"],
        script_name=launch.get("script_name") or "")
    check_code_programs(request, code_dirs[0] if code_dirs else None)
    return Launch(
        opts, settings, mode_obj, options, request, new_run_id(), sweep_of(launch) or "",
        function_bytes, [(j.log_dir / BUNDLE_DIR / VARIANT_PKL).read_bytes() for j in olds],
        None, tuple(dict(record, resubmitted_from=j.id,
                         sweep_index=j.launch_info.get("sweep_index", i))
                    for i, j in enumerate(olds)), script_argv(launch))


def resume_sweep(sweep: str, config: ConfigArg = None, detach: bool | None = None,
                 current_code: bool = False, current_settings: bool = False
                 ) -> tuple[str, list[tuple[Entry, Job]]]:
    """Launch again, as new runs of the recorded sweep ``sweep`` (its id or a unique start of
    one), the runs that did not succeed: the last run of each variant's runs where none
    succeeded or is under way, each launch's together (:func:`resubmit_launch`, with its
    ``detach``, ``current_code`` and ``current_settings``), holding the sweep's lock. Returns
    the line saying what was done, and each run launched again with its new Job."""
    registry = registry_of(load_settings(config))
    sweep_id = registry.find_sweep(sweep)
    with sweep_lock(registry, sweep_id):
        entries = sweep_entries(registry, sweep_id)
        olds = to_relaunch(entries)
        launches: dict[str, list[Entry]] = {}
        for entry in olds:
            launches.setdefault(launch_of(entry), []).append(entry)
        done = [pair for group in launches.values() for pair in zip(group, resubmit_launch(
            [e.id for e in group], config, detach if group[0].mode == "local" else None,
            current_code, current_settings), strict=True)]
    kept_states = [e.state for e in entries if kept(e)]
    return resume_line(sweep_id, [e.state for e in olds], kept_states, "runs"), done

"""How a checked launch's runs are made and started: the Launch (what its runs share), its
payloads pickled, its mode's check while the runs are made, the submission and the registry
rows, and the line that says where the runs went. ``run_sweep`` and ``resubmit`` both use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from easylaunch.api.options import (
    LaunchOptions,
    script_name,
)
from easylaunch.modes.base import Mode
from easylaunch.modes.console import track
from easylaunch.runs.bundle import (
    BundleSpec,
    Run,
    bundle_blobs,
    create_run,
    make_store,
    mark_submitted,
)
from easylaunch.runs.commands import (
    working_folder,
)
from easylaunch.runs.gitinfo import git_infos
from easylaunch.runs.payload import pickle_payload, warn_if_large
from easylaunch.runs.preview import PlannedRun, Preview, show
from easylaunch.runs.rebuild import (
    KEYWORDS_SOURCE,
    function_name,
)
from easylaunch.runs.record import LaunchRequest, sweep_of
from easylaunch.runs.snapshot import snapshot
from easylaunch.settings import Settings, save_settings
from easylaunch.tracking.interrupts import config_flag
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.registry import Registry
from easylaunch.tracking.rows import aborted, registry_row, settle_abandoned
from easylaunch_job.command import Command
from easylaunch_job.records import SNAPSHOT_STORE

SETTINGS_STORE = ".settings"


def start_runs(mode_obj: Mode, request: LaunchRequest, runs: list[Run], facts: Any,
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


def payloads(mode_obj: Mode, method_call: Callable[..., Any], variants: list[dict],
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
class Launch:
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
            restart=restart_policy(s),
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
            facts = self.facts if pending is None else checked_by_mode(pending, runs, registry)
            return start_runs(self.mode, self.request, runs, facts, registry)
        finally:
            sink.abort()  # (finished by then, or no longer wanted)


def restart_policy(settings: Settings) -> dict:
    """The runner's RestartPolicy, as bundle.json has it."""
    return {"max_restarts": settings.MAX_RESTARTS, "on_error": settings.RESTART_ON_ERROR,
            "grace_seconds": settings.CHECKPOINT_GRACE_SECONDS}


@overload
def started(launch: Launch, registry: Registry) -> list[Job]: ...


@overload
def started(launch: Launch, registry: None) -> Preview: ...


@overload
def started(launch: Launch, registry: Registry | None) -> list[Job] | Preview: ...


def started(launch: Launch, registry: Registry | None) -> list[Job] | Preview:
    """Check the launch with its mode (while the runs are made, for a far host) and start it;
    without a registry, show it as a dry run."""
    if registry is not None and launch.mode.checks_while_runs_are_made():
        return launch.start(registry, check=launch.mode.check)
    launch = dataclasses.replace(launch, facts=launch.mode.check(launch.request))
    return launch.dry_run() if registry is None else launch.start(registry)


def checked_by_mode(pending: Future, runs: list[Run], registry: Registry) -> Any:
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

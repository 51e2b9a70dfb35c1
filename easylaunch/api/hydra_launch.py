"""What ``hydra/launcher=easylaunch`` does (its plugin class, in ``hydra_plugins``, calls these).

Each launch of a multirun is a :func:`run_sweep` of one variant per Hydra job; every launch of
one multirun joins the sweep of its first. Imported only when a multirun uses the launcher
(the ``hydra`` extra).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.errors import CompactHydraException
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from easylaunch.api.launch import run_sweep
from easylaunch.errors import EasyLaunchError, LaunchError
from easylaunch.runs.record import sweep_of
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.progress import wait_all
from easylaunch_job import hydra_job

logger = logging.getLogger(__name__)

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
LAUNCH_RECORD = "easylaunch.json"  # in Hydra's sweep folder: the sweep and each job's run
NOT_RUN_SWEEP_KEYWORDS = ("wait", "exp_name", "sweep", "options")  # the rest go to run_sweep


class EasylaunchRefused(CompactHydraException):
    """An easylaunch error in a launch, which Hydra shows as its message alone (the traceback
    with HYDRA_FULL_ERROR=1)."""


@contextlib.contextmanager
def compact_errors() -> Iterator[None]:
    """easylaunch's errors (a bad option, a refused launch) as Hydra's compact errors."""
    try:
        yield
    except EasyLaunchError as exc:
        raise EasylaunchRefused(f"easylaunch: {exc}") from exc


@compact_errors()
def check_sweeper(config: DictConfig, launcher_config: Mapping[str, Any]) -> None:
    """Refuse ``wait=false`` under a sweeper that reads every job's return value."""
    sweeper = OmegaConf.select(config, "hydra.sweeper._target_")
    if not launcher_config.get("wait", True) and sweeper != BASIC_SWEEPER:
        raise LaunchError(f"hydra.launcher.wait=false returns before the jobs end; {sweeper} "
                          "needs every job's return value. Use wait=true, or "
                          "easylaunch.run_search for an asynchronous search")


@compact_errors()
def launch_jobs(launcher_config: Mapping[str, Any], sweep_id: str | None,
                hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                job_overrides: Sequence[Sequence[str]], initial_job_idx: int
                ) -> tuple[list[JobReturn], str]:
    """Launch the jobs as runs of one sweep (``sweep_id``'s, if an earlier launch of this
    multirun made one); return Hydra's JobReturns (none with ``wait=false``) and the sweep."""
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()  # (read once: ${now:...} fixed)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with read_write(config.hydra.sweep):  # (the jobs run elsewhere: not relative to their cwd)
        config.hydra.sweep.dir = str(sweep_dir)
    wait = launcher_config.get("wait", True)
    mode = launcher_config.get("mode", "local")
    job_name = str(config.hydra.job.name)
    logger.info(f"Launching {len(job_overrides)} jobs as easylaunch runs (mode {mode})")
    numbered = [(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
    for idx, overrides in numbered:
        logger.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
    variants = job_variants([overrides for _, overrides in numbered])
    # (the job numbers ride with the function, not the variants, which resume matches: a
    # value added to the sweep renumbers the jobs after it, which are still the same jobs)
    numbers = {hydra_job.numbered(v): idx for (idx, _), v in zip(numbered, variants, strict=True)}
    payload = (Singleton.get_state(), hydra_context, config, task_function, numbers)
    jobs = run_sweep(functools.partial(hydra_job.run, payload), variants,
                     exp_name=launcher_config.get("exp_name") or job_name,
                     sweep=sweep_id or launcher_config.get("sweep"),
                     **sweep_keywords(launcher_config))
    assert isinstance(jobs, list)  # (a dry run is not a launcher option)
    sweep = str(sweep_of(jobs[0].launch_info))
    runs = {str(idx): job.id for (idx, _), job in zip(numbered, jobs, strict=True)}
    record_launch(sweep_dir / LAUNCH_RECORD, sweep, runs, later=sweep_id is not None)
    if not wait:  # (the mode has said where the runs are and how to follow them)
        return [], sweep
    wait_all(jobs)
    return [job_return(hydra_context, config, job_name, overrides, idx, job)
            for (idx, overrides), job in zip(numbered, jobs, strict=True)], sweep


def record_launch(path: Path, sweep: str, runs: dict[str, str], *, later: bool) -> None:
    """Write the sweep and the run of each job number to ``path``; a later launch of the
    multirun (each batch of Optuna's sweeper) adds its runs to the earlier launches'."""
    if later:
        runs = {**json.loads(path.read_text())["runs"], **runs}
    path.write_text(json.dumps({"sweep": sweep, "runs": runs}, indent=1))


def sweep_keywords(launcher_config: Mapping[str, Any]) -> dict[str, Any]:
    """run_sweep's keywords from the launcher's config: its fields that are set, then
    ``options``; local runs that the launch does not wait for are detached (they outlive the
    Hydra process)."""
    given = {k: v for k, v in launcher_config.items()
             if k not in NOT_RUN_SWEEP_KEYWORDS and v is not None}
    options = launcher_config.get("options") or {}
    if isinstance(options, DictConfig):  # (as Hydra gives it)
        options = OmegaConf.to_container(options, resolve=True)
    given.update(cast("dict[str, Any]", options))
    if not launcher_config.get("wait", True) and given.get("mode", "local") == "local":
        given.setdefault("detach", True)
    return given


def job_variants(job_overrides: list[list[str]]) -> list[dict[str, Any]]:
    """Each job's variant: its overrides, and their values by key (what ``ls --variant`` and
    load_sweep show); what resume matches. A dotted key nests (``model.lr=0.1``: ``params.
    model.lr``); a group's choice beside its keys (``db=mysql db.user=me``) is ``db._choice``.
    A job whose overrides an earlier job of the launch has too (``seed=0,1,1``) is told apart
    by ``repeat``: 1 for the second, 2 for the third."""
    parser = OverridesParser.create()
    seen: dict[str, int] = {}
    variants = []
    for overrides in job_overrides:
        params: dict[str, Any] = {}
        for override in parser.parse_overrides(overrides):
            if not override.is_delete():
                _put(params, override.key_or_group.split("."), override.value())
        variant: dict[str, Any] = {"overrides": overrides, "params": params}
        repeat = seen[json.dumps(overrides)] = seen.get(json.dumps(overrides), -1) + 1
        if repeat:
            variant[hydra_job.REPEAT] = repeat
        variants.append(variant)
    return variants


GROUP_CHOICE = "_choice"  # a group's choice, where the params also hold keys of the group


def _put(params: dict[str, Any], path: list[str], value: Any) -> None:
    """``value`` at ``path`` in nested ``params``."""
    node = params
    for name in path[:-1]:
        child = node.get(name)
        if not isinstance(child, dict):
            child = node[name] = {} if name not in node else {GROUP_CHOICE: child}
        node = child
    if isinstance(node.get(path[-1]), dict):
        node[path[-1]][GROUP_CHOICE] = value
    else:
        node[path[-1]] = value


def job_return(hydra_context: HydraContext, config: DictConfig, job_name: str,
               overrides: list[str], num: int, job: Job) -> JobReturn:
    """Hydra's JobReturn of a run that ended, with the job's own config (its id, number and
    output folder): its value, or its exception (Hydra re-raises it when the sweeper reads
    the value)."""
    hydra_cfg = hydra_job.job_config(hydra_context, config, overrides, job.id, num)
    recorded = Path(job.log_dir) / hydra_job.HYDRA_OUTPUT
    working_dir = recorded.read_text().strip() if recorded.is_file() else \
        hydra_job.output_dir(hydra_cfg)
    with read_write(hydra_cfg), open_dict(hydra_cfg):
        hydra_cfg.hydra.runtime.output_dir = working_dir
    task_cfg = copy.deepcopy(hydra_cfg)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    ret = JobReturn(overrides=overrides, cfg=task_cfg, hydra_cfg=hydra_cfg,
                    working_dir=working_dir, task_name=job_name)
    try:
        ret.return_value, ret.status = job.result(), JobStatus.COMPLETED
    except Exception as exc:  # noqa: BLE001 - the job's failure, for Hydra to re-raise
        ret.return_value, ret.status = exc, JobStatus.FAILED
    return ret

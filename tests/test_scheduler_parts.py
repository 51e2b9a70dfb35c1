"""A scheduler as a maintainer adds one: the core of ten members (an LSF-like scheduler,
``bsub`` arrays, from tests/fixtures/plugin) is enough for a mode to write and submit a
sweep's array script, and what it does not declare (shells, packing, broadcast) is refused by
name."""

import os
import posixpath
import sys

import jobfns
import pytest
from conftest import TESTS_DIR

from easylaunch import run_sweep
from easylaunch.errors import LaunchError
from easylaunch.modes import MODES
from easylaunch.modes.schedulers import Scheduler, broadcasting, packing, shells, slurm
from easylaunch.tracking.listing import job_label
from easylaunch.tracking.registry import open_registry

sys.path.insert(0, str(TESTS_DIR / "fixtures" / "plugin"))
from easylaunch_lsf import Lsf  # noqa: E402  (the fixture's folder is no package)


def test_a_scheduler_defines_ten_members_and_the_rest_has_defaults():
    assert sorted(Scheduler.__abstractmethods__) == [
        "array_header", "cancel_command", "element_fields", "job_exports", "read_states",
        "resources", "status_commands"]  # (and NAME, SIDE, OPTIONS)
    sched = Lsf()
    assert (sched.job_id_key, sched.script_dir, sched.python_key) == \
        ("lsf_job_id", ".lsf", "LSF_PYTHON")
    assert sched.parse_submit("Job <42> is submitted to queue <normal>.\n") == "42"
    with pytest.raises(LaunchError, match="bsub printed no job id"):
        sched.parse_submit("Request aborted by esub.\n")


def test_a_scheduler_of_the_core_alone_writes_a_sweeps_array_script(cfg, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setitem(MODES, "lsf", "easylaunch_lsf:SCHEDULER")
    bin_dir = tmp_path / "bin"  # (a dry run asks whether bsub is there, and never runs it)
    bin_dir.mkdir()
    (bin_dir / "bsub").write_text("#!/bin/sh\necho 'a dry run submitted' >&2\nexit 1\n")
    (bin_dir / "bsub").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    shown = run_sweep(jobfns.train, [{}, {}, {}], exp_name="lsf-sweep", mode="lsf",
                      queue="short", config=cfg, dry_run=True)
    ((path, script),) = shown.files.items()
    assert "/lsf-sweep/.lsf/" in path and path.endswith(".sh")
    assert "#BSUB -J lsf-sweep[1-3]\n#BSUB -q short\n" in script
    assert "i=$(( ${LSB_JOBINDEX:-1} - 1 ))" in script  # (the entry this element runs)
    assert shown.commands == [f"cd {posixpath.dirname(path)} && bsub {path}"]


def test_a_scheduler_of_the_core_alone_submits_a_sweep_and_says_where_it_went(
        cfg, tmp_path, monkeypatch, capsys):
    """A stand-in bsub prints LSF's answer: the runs record their array and elements, and the
    launch line names the job, though the scheduler's fields never named the array."""
    monkeypatch.setitem(MODES, "lsf", "easylaunch_lsf:SCHEDULER")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bsub").write_text("#!/bin/sh\necho 'Job <4711> is submitted to queue "
                                  "<short>.'\n")
    (bin_dir / "bsub").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    jobs = run_sweep(jobfns.train, [{}, {}], exp_name="lsf-sweep", mode="lsf", queue="short",
                     config=cfg)
    backends = [job.launch_info["backend"] for job in jobs]
    assert [(b["array_job_id"], b["lsf_job_id"]) for b in backends] == [
        ("4711", "4711[1]"), ("4711", "4711[2]")]
    assert "submitted as LSF job 4711 (an array of 2)" in capsys.readouterr().err
    # ls's JOB column names each element, though the listing knows no LSF field by name
    assert [job_label(open_registry().find(job.id)) for job in jobs] == ["4711[1]", "4711[2]"]


@pytest.mark.parametrize("ask, what, has", [
    (shells, "easylaunch shell", "Shells (interactive_argv, shell_argv, shell_lookup)"),
    (packing, "mode 'lsf_htp'", "Packing (node_workers, packed, packed_gpus, packed_header)"),
    (broadcasting, "env_pack", "Broadcast (broadcast)")])
def test_what_a_scheduler_does_not_declare_is_refused_by_name(ask, what, has):
    with pytest.raises(LaunchError) as refused:
        ask(Lsf(), what)
    assert str(refused.value) == f"{what} is not on LSF: its scheduler module has no {has}"
    assert ask(slurm.SCHEDULER, what) is slurm.SCHEDULER  # (Slurm declares all three)


def test_doctor_looks_for_a_new_schedulers_commands(monkeypatch):
    """easylaunch doctor asks the scheduler which commands its mode runs: none listed by
    hand."""
    from easylaunch.cli.doctor import mode_commands

    monkeypatch.setitem(MODES, "lsf", "easylaunch_lsf:SCHEDULER")
    assert mode_commands()["lsf"] == (("bsub",), ("bjobs",), ("bkill",))
    assert mode_commands()["pbs"] == (("qsub",), ("qstat",), ("qdel",))

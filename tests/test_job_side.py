"""The job side (easylaunch_job): one package, one floor, one file that travels."""

import ast
import collections
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import REPO_DIR

import easylaunch_job
from easylaunch.runs.jobpack import job_archive
from easylaunch_job.schedulers import SCHEDULERS

JOB_SIDE = REPO_DIR / "easylaunch_job"
HOST_SIDE = REPO_DIR / "easylaunch"


def _write_archive(tmp_path: Path) -> Path:
    path = tmp_path / "job.pyz"
    path.write_bytes(job_archive())
    return path


def test_the_job_side_needs_no_newer_python_than_its_floor():
    """vermin reads every module (syntax and standard library use) against PYTHON_FLOOR."""
    floor = "{}.{}".format(*easylaunch_job.PYTHON_FLOOR)
    vermin = Path(sys.executable).with_name("vermin")
    proc = subprocess.run([str(vermin), f"-t={floor}-", "--no-tips",
                           "--violations", str(JOB_SIDE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


FLOOR_CHECK = """
import importlib, pkgutil, sys
sys.path.insert(0, sys.argv[1])
import easylaunch_job
from easylaunch_job.host_ops import answer
for module in pkgutil.walk_packages(easylaunch_job.__path__, "easylaunch_job."):
    importlib.import_module(module.name)
print(answer([{"op": "info"}])[0]["python"][:2])
"""


def test_every_job_side_module_imports_and_answers_on_the_floor_python(tmp_path):
    """vermin reads the syntax; this runs the archive on the floor's own interpreter (pyenv's,
    on this machine), where a value such as dict[str, Any] fails at import."""
    floor = "{}.{}".format(*easylaunch_job.PYTHON_FLOOR)
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(root.glob(f"versions/{floor}.*/bin/python{floor}"))
    assert found, f"no Python {floor} under {root}/versions: pyenv install {floor}"
    proc = subprocess.run([str(found[-1]), "-c", FLOOR_CHECK, str(_write_archive(tmp_path))],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(list(easylaunch_job.PYTHON_FLOOR))  # (it ran there)


def test_an_older_python_than_the_floor_is_told_so(tmp_path):
    archive = _write_archive(tmp_path)
    program = ("import sys; sys.path.insert(0, sys.argv[1]); import easylaunch_job; "
               "easylaunch_job.PYTHON_FLOOR = (99, 0); "
               "from easylaunch_job.__main__ import main; sys.exit(main(['run', 'x']))")
    proc = subprocess.run([sys.executable, "-c", program, str(archive)], capture_output=True,
                          text=True)
    assert proc.returncode == 3
    assert "needs Python 99.0 or newer" in proc.stderr


def test_the_archive_is_the_same_bytes_in_every_process(tmp_path):
    program = ("import hashlib; from easylaunch.runs.jobpack import job_archive; "
               "print(hashlib.sha256(job_archive()).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              check=True).stdout for _ in range(2)}
    assert len(digests) == 1
    names = zipfile.ZipFile(_write_archive(tmp_path)).namelist()
    assert names[:2] == ["__main__.py", "__main__.pyc"]
    sources = {f"easylaunch_job/{p.relative_to(JOB_SIDE).as_posix()}"
               for p in JOB_SIDE.rglob("*.py")}
    assert sources == {name for name in names[2:] if name.endswith(".py")}
    assert "easylaunch_job/run.pyc" in names and "easylaunch_job/packer.pyc" not in names


def test_a_run_starts_from_bytecode_and_another_python_from_source(tmp_path):
    """The archive's .pyc files are this Python's: used here, skipped where the magic number
    differs (the source is compiled instead)."""
    archive = _write_archive(tmp_path)
    program = ("import sys; sys.path.insert(0, sys.argv[1]); import easylaunch_job.run as m; "
               "print(m.__spec__.loader.get_code('easylaunch_job.run').co_filename)")
    proc = subprocess.run([sys.executable, "-S", "-c", program, str(archive)],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "easylaunch_job/run.py"  # (compiled here: no archive path)
    foreign = tmp_path / "foreign.pyz"
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(foreign, "w") as dest:
        for info in source.infolist():
            data = source.read(info)
            dest.writestr(info, b"\0\0\r\n" + data[4:] if info.filename.endswith(".pyc")
                          else data)
    proc = subprocess.run([sys.executable, "-S", "-c", program, str(foreign)],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == f"{foreign}/easylaunch_job/run.py"


def test_the_archive_runs_alone_and_names_its_commands(tmp_path):
    """With no site-packages (-S) and only the archive on the path, every command's module
    imports, and nothing of the launching side comes along."""
    archive = _write_archive(tmp_path)
    program = ("import sys; sys.path.insert(0, sys.argv[1]); "
               "import easylaunch_job.supervisor, easylaunch_job.packer, "
               "easylaunch_job.host_ops, easylaunch_job.cloud.agent; "
               "print(sorted(m for m in sys.modules if m.split('.')[0] == 'easylaunch'))")
    proc = subprocess.run([sys.executable, "-S", "-c", program, str(archive)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    usage = subprocess.run([sys.executable, "-S", str(archive)], capture_output=True, text=True)
    assert usage.returncode == 2 and "agent|forkserver|pack|run|serve" in usage.stderr


def _top_level_names(root: Path) -> dict:
    names = collections.defaultdict(list)
    for path in root.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            found = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
                [t.id for t in targets if isinstance(t, ast.Name)]
            for name in found:
                names[name].append(path.relative_to(REPO_DIR).as_posix())
    return names


def test_no_name_is_defined_on_both_sides():
    """A helper, constant or state the two sides share is defined on the job side alone
    (``main``, each command's entry point, excepted)."""
    job, host = _top_level_names(JOB_SIDE), _top_level_names(HOST_SIDE)
    both = {name: (job[name], host[name]) for name in set(job) & set(host) - {"main"}}
    assert not both


def test_placing_uploaded_runs_moves_each_new_run_whole_and_never_overwrites(tmp_path):
    from easylaunch_job.host_ops import answer

    incoming, root = tmp_path / ".incoming", tmp_path / "root"
    for run in ("exp/r1", "exp/r2"):
        (incoming / run / "bundle").mkdir(parents=True)
        (incoming / run / "bundle" / "variant.pkl").write_text("v")
        (incoming / run / "status.json").write_text("{}")
    (root / "exp" / "r2").mkdir(parents=True)  # r2's folder there already holds a file of ours
    (root / "exp" / "r2" / "status.json").write_text("earlier")
    plain = [f"exp/{r}/{name}" for r in ("r1", "r2") for name in ("bundle", "status.json")]
    (placed,) = answer([{"op": "place", "incoming": str(incoming), "store": str(root),
                         "root": str(root), "shared": [], "plain": plain}])
    assert (root / "exp" / "r1" / "bundle" / "variant.pkl").read_text() == "v"
    assert "r2/status.json exists already" in placed["error"]
    assert (root / "exp" / "r2" / "status.json").read_text() == "earlier"  # left as it was
    assert not (incoming / "exp" / "r1").exists()


def test_each_job_script_names_its_scheduler_and_the_job_side_takes_that_table(monkeypatch,
                                                                             tmp_path):
    """The job side picks a scheduler's table (submit command, job id, resubmission) by the
    name the job script exports, never by a tool's file name."""
    import re
    import types

    from easylaunch.modes.schedulers import pbs, slurm
    from easylaunch_job.environment import ENV_SCHEDULER
    from easylaunch_job.schedulers import this_jobs

    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#PBS -J 0-3\n#SBATCH --array=0-3\ntrue\n")
    for sched in (slurm, pbs):
        assert SCHEDULERS[sched.SIDE.name] is sched.SIDE
        res = types.SimpleNamespace(walltime_seconds=60, time_minutes=1)  # (what exports read)
        (name,) = re.findall(rf"\b{ENV_SCHEDULER}=(\S+)", sched.job_exports(res, str(script)))
        monkeypatch.setenv(ENV_SCHEDULER, name)
        assert this_jobs() is sched.SIDE
        argv, _ = this_jobs().resubmission(str(script))
        assert argv[0] == sched.SIDE.tool, argv


def test_job_pyz_submit_refuses_a_scheduler_it_does_not_know(tmp_path):
    done = subprocess.run([sys.executable, str(_write_archive(tmp_path)), "submit", "nqs",
                           str(tmp_path / "ids.txt"), "r1", "true"], capture_output=True,
                          text=True)
    known = ",".join(SCHEDULERS)
    assert done.returncode == 2 and f"usage: job.pyz submit {{{known}}}" in done.stderr
    assert not (tmp_path / "ids.txt").exists()


def test_a_pool_job_waiting_says_why_only_when_slurm_gave_a_reason(monkeypatch):
    """squeue's reason is the word None until the scheduler gives one: pool ls then says
    the job waits, without "(None)"."""
    from easylaunch_job import schedulers

    said = {"reason": "None"}
    monkeypatch.setattr(schedulers, "_asked",
                        lambda argv: f"PENDING|1:00:00|(null)|{said['reason']}")
    assert schedulers.SLURM_SIDE.standing("7") == "Slurm job 7, waiting for its allocation"
    said["reason"] = "Priority"
    assert schedulers.SLURM_SIDE.standing("7") == \
        "Slurm job 7, waiting for its allocation (Priority)"

"""A researcher's notebook, run for real: nbclient drives an ipykernel (this venv's Python), one
kernel for the module, its cells written with nbformat and saved as the notebook at the end."""

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import nbclient
import nbformat
import pytest
from helpers import wait_for

TRAIN = '''\
def train(doodad_config, variant):
    if variant.get("fail"):
        raise ValueError("bad lr " + str(variant["lr"]))  # the cell's own line
    return {"loss": variant["lr"] * 2}
'''


class Notebook:
    """A notebook being run: each :meth:`run` adds a code cell and executes it in the kernel."""

    def __init__(self, folder: Path, env: dict) -> None:
        self.path = folder / "research.ipynb"
        self.nb = nbformat.v4.new_notebook()
        # (nbclient waits 4 s after a cell's reply for its output, then drops what is late
        # without a word; under CI load a print came later. Wait longer, and fail if it is late.)
        self.client = nbclient.NotebookClient(
            self.nb, kernel_name="python3", timeout=240, iopub_timeout=60,
            raise_on_iopub_timeout=True, resources={"metadata": {"path": str(folder)}})
        self.env = env

    def run(self, source: str, error: bool = False) -> str:
        """The cell's text outputs (streams, results, an error's traceback), ANSI colours
        removed; an error in a cell not expected to raise fails the test."""
        cell = nbformat.v4.new_code_cell(source)
        if error:
            cell.metadata["tags"] = ["raises-exception"]
        self.nb.cells.append(cell)
        self.client.execute_cell(cell, len(self.nb.cells) - 1)
        return text_of(cell.outputs)

    def value(self, expression: str):
        """``expression`` evaluated in the kernel, as JSON (str() for what JSON cannot say).
        It is written in one call, on a line of its own: print() writes its parts one by
        one, and another thread's output can come between them (its line was missing once
        in CI)."""
        out = self.run("import json as _json, sys as _sys; _sys.stdout.write("
                       f"'\\n=> ' + _json.dumps({expression}, default=str) + '\\n')")
        return json.loads(next(line for line in out.splitlines() if line.startswith("=> "))[3:])

    def interrupt(self) -> None:
        """What Jupyter's stop button does: interrupt the kernel (SIGINT to it)."""
        result = self.client.km.interrupt_kernel()
        if asyncio.iscoroutine(result):
            asyncio.run(result)


def text_of(outputs: list) -> str:
    parts = []
    for out in outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.data.get("text/plain", ""))
            parts.append(out.data.get("text/html", ""))
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(parts))


def notebook_folder(folder: Path) -> tuple[Path, dict]:
    """A notebook's folder (a module beside it, a settings file) and its kernel's environment,
    as Jupyter sets it (JPY_SESSION_NAME: the notebook's path)."""
    (folder / "helpers.py").write_text("def scale(x):\n    return x * 10\n")
    (folder / "settings.py").write_text(
        f"LOCAL_LOG_DIR = {str(folder / 'logs')!r}\n"
        f"REGISTRY_PATH = {str(folder / 'registry.sqlite3')!r}\n"
        f"SLURM_PYTHON = {sys.executable!r}\n"
        f"SLURM_CONFIGS = dict(cpu=dict(max_num_cores_per_node={os.cpu_count()}, "
        "time_in_mins=10))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(HOME=str(folder / "home"), EASYLAUNCH_CONFIG=str(folder / "settings.py"),
               JPY_SESSION_NAME=str(folder / "research.ipynb"))
    env.pop("XDG_DATA_HOME", None)
    (folder / "home").mkdir()
    return folder, env


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    folder, env = notebook_folder(tmp_path_factory.mktemp("notebook"))
    book = Notebook(folder, env)
    with book.client.setup_kernel(env=env, cwd=str(folder)):
        book.run("import easylaunch, sys\nfrom easylaunch import run_experiment, JobState\n"
                 + TRAIN)
        yield book
        nbformat.write(book.nb, book.path)


def test_the_kernel_runs_this_venvs_python(notebook):
    assert notebook.value("sys.executable") == sys.executable


@pytest.mark.parametrize("mode", ["local", "here_no_doodad", "slurm"])
def test_a_cell_defined_function_runs_and_its_traceback_shows_the_cell_line(
        notebook, mode, request):
    if mode == "slurm":
        request.getfixturevalue("slurm_cluster")
    out = notebook.run(f"ok = run_experiment(train, variant={{'lr': 3}}, mode={mode!r})\n"
                       "print(ok.result(timeout=120))")
    assert "{'loss': 6}" in out
    here = mode == "here_no_doodad"  # (it runs in the kernel: the launch raises, as a call)
    shown = notebook.run(f"bad = run_experiment(train, variant={{'lr': 1, 'fail': True}}, "
                         f"mode={mode!r})\nbad.wait(timeout=120)", error=here)
    line = 'raise ValueError("bad lr " + str(variant["lr"]))  # the cell\'s own line'
    if here:
        assert line in shown and "ValueError: bad lr 1" in shown
        assert "easylaunch/" not in shown, shown
        newest = max((notebook.path.parent / "logs").glob("*/*"), key=os.path.getmtime)
        assert line in (newest / "stderr.log").read_text()
        return
    assert notebook.value("bad.status()") == "failed"
    log_dir = notebook.value("bad.log_dir")
    assert line in (Path(log_dir) / "stderr.log").read_text()
    shown = notebook.run("bad.result()", error=True)
    assert line in shown and "ValueError: bad lr 1" in shown
    assert "jobs.py" not in shown and "easylaunch/" not in shown, shown
    notebook.run("import pickle\ntry:\n    bad.result()\nexcept ValueError as exc:\n"
                 "    assert str(pickle.loads(pickle.dumps(exc))) == 'bad lr 1'")  # (as before)


def test_a_module_beside_the_notebook_imported_in_the_body_reaches_the_run(notebook):
    out = notebook.run("def scaled(doodad_config, variant):\n"
                       "    import helpers\n"
                       "    return helpers.scale(variant['x'])\n"
                       "print(run_experiment(scaled, variant={'x': 4}).result(timeout=60))")
    assert out.splitlines()[0] == "40"


def test_the_run_records_the_notebook_as_its_script(notebook):
    notebook.run("ok = run_experiment(train, variant={'lr': 3})\nok.wait(timeout=60)")
    assert notebook.value("ok.launch_info['script_name']") == str(notebook.path)
    folder = notebook.path.parent

    def resubmit(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "easylaunch.cli", "resubmit", *flags, notebook.value("ok.id")],
            capture_output=True, text=True, cwd=folder, env=notebook.env)

    said = resubmit("--current-code")
    assert said.returncode != 0
    assert "ipykernel_launcher" not in said.stderr
    assert f"defined in {notebook.path}" in said.stderr, said.stderr
    assert "run the notebook's cell again" in said.stderr, said.stderr
    assert "resubmit without --current-code" in said.stderr, said.stderr
    said = resubmit()  # (as launched: what the message offers)
    assert said.returncode == 0, said.stderr


def test_without_jupyters_path_a_run_records_a_notebook(notebook):
    notebook.run("import os\nfrom easylaunch.runs import process as nb\n"
                 "saved = os.environ.pop('JPY_SESSION_NAME'), __session__\n"
                 "del __session__")
    try:
        assert notebook.value("nb.notebook_path()") == "a notebook"
        notebook.run("anon = run_experiment(train, variant={'lr': 1}, mode='here_no_doodad')")
        assert notebook.value("anon.launch_info['script_name']") == "a notebook"
    finally:
        notebook.run("os.environ['JPY_SESSION_NAME'], __session__ = saved")
    assert notebook.value("nb.notebook_path()") == str(notebook.path)


def test_resume_from_a_notebook_launches_only_what_did_not_succeed(notebook):
    cell = ("jobs = easylaunch.run_sweep(train, [{'lr': 1}, {'lr': 2, 'fail': FAIL}], "
            "exp_name='nbresume', resume=True)\neasylaunch.wait_all(jobs, timeout=60)\n")
    notebook.run("FAIL = True\n" + cell)
    first = notebook.value("[(j.id, str(j.status())) for j in jobs]")
    assert [state for _, state in first] == ["succeeded", "failed"]
    notebook.run("FAIL = False\n" + cell)  # (the fix, and the same cell run again)
    again = notebook.value("[(j.id, str(j.status())) for j in jobs]")
    assert again[0] == first[0] and again[1][0] != first[1][0], (first, again)
    assert again[1][1] == "succeeded"


def test_jobs_and_states_show_as_short_text(notebook):
    notebook.run("ok = run_experiment(train, variant={'lr': 3})\n"
                 "bad = run_experiment(train, variant={'lr': 1, 'fail': True})\n"
                 "easylaunch.wait_all([ok, bad], timeout=60)")
    out = notebook.run("JobState.SUCCEEDED")
    assert out.splitlines()[0] == "succeeded"
    out = notebook.run("ok")
    assert out.splitlines()[0].startswith(f"Job(id={notebook.value('ok.id')!r}")
    assert "<table" in out and "succeeded" in out
    out = notebook.run("[ok, bad]")
    assert "succeeded" in out and "failed" in out and len(out.splitlines()) <= 3


def test_a_search_is_quiet_and_shows_as_text(notebook):
    out = notebook.run(
        "def objective(doodad_config, variant):\n"
        "    return {'loss': (variant['x'] - 1) ** 2}\n"
        "search = easylaunch.run_search(objective, {'x': [0, 1, 2]}, 'loss', n_trials=3,\n"
        "                               max_parallel=3, sampler='grid', exp_name='nbsearch')\n"
        "search")
    assert "A new study created" not in out and "[I " not in out, out
    assert "Warning" not in out, out  # (tqdm's, on Optuna's import, in a kernel)
    assert "finished=3/3" in out and "<table" in out, out


MARK_WHEN_WAITING = """\
import sys, threading, time
def mark_when_waiting(path):
    '''Write path once the kernel's main thread is in one of easylaunch's waits.'''
    def waiting():
        frame = sys._current_frames().get(threading.main_thread().ident)
        while frame is not None:
            if ("easylaunch" in frame.f_code.co_filename
                    and frame.f_code.co_name in ("wait", "wait_all", "drive")):
                return True
            frame = frame.f_back
        return False
    def mark():
        while not waiting():
            time.sleep(0.01)
        open(path, "w").close()
    threading.Thread(target=mark, daemon=True).start()
"""


def test_an_interrupt_during_wait_says_what_happens_and_leaves_the_kernel_usable(notebook):
    notebook.run("import time\n"
                 "def slow(doodad_config, variant):\n"
                 "    time.sleep(60)\n"
                 "slow_job = run_experiment(slow, exp_name='slow')")
    log_dir = Path(notebook.value("slow_job.log_dir"))
    run_id = notebook.value("slow_job.id")
    assert wait_for(lambda: json.loads((log_dir / "status.json").read_text()).get("state")
                    == "running", 60)

    notebook.run(MARK_WHEN_WAITING)

    def interrupted(wait: str, ready=lambda: True) -> str:
        """The output of a cell that waits, stopped as Jupyter's stop button stops it once
        the cell is in easylaunch's wait and ``ready()``."""
        marker = notebook.path.parent / "waiting"
        marker.unlink(missing_ok=True)

        def stop_when_waiting():
            wait_for(lambda: marker.exists() and ready(), 60)
            notebook.interrupt()

        stopper = threading.Thread(target=stop_when_waiting)
        stopper.start()
        out = notebook.run(f"mark_when_waiting('waiting')\n{wait}", error=True)
        stopper.join()
        return out

    for wait in ("slow_job.wait()", "easylaunch.wait_all([slow_job])"):
        out = interrupted(wait)
        assert out.startswith(f"KeyboardInterrupt: interrupted (Ctrl-C); run {run_id} (local) "
                              "goes on: cancel it with `easylaunch cancel"), out
        assert out.rstrip().endswith(f" {run_id}`") and "cancelling" not in out, out
        assert notebook.value("slow_job.status()") == "running"
    notebook.run("slow_job.cancel()\nslow_job.wait(timeout=60)")
    assert notebook.value("slow_job.status()") == "cancelled"

    logs = notebook.path.parent / "logs"
    out = interrupted("easylaunch.run_search(slow, {'x': [0, 1]}, 'loss', n_trials=2, "
                      "sampler='grid', exp_name='nbslow')",
                      lambda: states(logs, "nbslow") == ["running", "running"])
    said = re.fullmatch(r"KeyboardInterrupt: interrupted \(Ctrl-C\); 2 local runs go on: cancel "
                        r"them with `(easylaunch cancel [^`]+)`; carry the search on with "
                        r"`easylaunch search resume --config \S+ nbslow-\w+`",
                        out.strip().splitlines()[-1])
    assert said, out
    cancel = [sys.executable, "-m", "easylaunch.cli", *said.group(1).split()[1:]]
    assert subprocess.run(cancel, env=notebook.env).returncode == 0
    assert wait_for(lambda: states(logs, "nbslow") == ["cancelled", "cancelled"], 30)

    # a detached search: its wait ends, the search goes on (its driver, its trials)
    out = interrupted("search = easylaunch.run_search(slow, {'x': [0, 1]}, 'loss', n_trials=2,"
                      " sampler='grid', exp_name='nbdetached', detach=True)\nsearch.wait()",
                      lambda: states(logs, "nbdetached") == ["running"] * 3)
    said = re.fullmatch(r"KeyboardInterrupt: interrupted \(Ctrl-C\); search (nbdetached-\w+) "
                        r"\(its driver: run \w+\) goes on: cancel it with `(easylaunch cancel "
                        r"[^`]+)` and `(easylaunch cancel [^`]+)`", out.strip().splitlines()[-1])
    assert said, out
    assert states(logs, "nbdetached") == ["running"] * 3
    for command in said.group(2, 3):
        cancel = [sys.executable, "-m", "easylaunch.cli", *command.split()[1:]]
        assert subprocess.run(cancel, env=notebook.env).returncode == 0
    assert wait_for(lambda: "running" not in states(logs, "nbdetached"), 30)


def states(logs: Path, exp_name: str) -> list:
    """The states of an experiment's runs, in order."""
    return sorted(json.loads(p.read_text()).get("state")
                  for p in (logs / exp_name).glob("*/status.json"))


def test_a_kernels_local_runs_end_with_it(tmp_path):
    folder, env = notebook_folder(tmp_path)
    book = Notebook(folder, env)
    with book.client.setup_kernel(env=env, cwd=str(folder)):
        book.run("import time\nfrom easylaunch import run_experiment\n"
                 "def slow(doodad_config, variant):\n"
                 "    time.sleep(120)\n"
                 "job = run_experiment(slow)\n"
                 "job.wait(timeout=0.5)")
        log_dir = Path(book.value("job.log_dir"))
        assert book.value("job.status()") == "running"
    # (the kernel's shutdown cancels its local runs, as its restart does, before it ends)
    status = json.loads((log_dir / "status.json").read_text())
    assert (status["state"], status.get("cancel_requested")) == ("cancelled", True), status

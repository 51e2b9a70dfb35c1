"""easylaunch as ``pip install easylaunch`` leaves it: no extras (.venv-core, made by
scripts/setup.sh). Every command's --help, preview and a first sweep work there; what needs an
extra says which, in one line (the CLI) or as MissingExtra (Python)."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import import_graph
import pytest
import tomllib
from conftest import REPO_DIR, settings_file
from helpers import docs_reference

CORE = REPO_DIR / ".venv-core"  # pip install -e .
DOCS = REPO_DIR / ".venv-docs"  # pip install -e '.[docs]'
PYTHON = CORE / "bin" / "python"
EASYLAUNCH = CORE / "bin" / "easylaunch"


@pytest.fixture(scope="module")
def core() -> Path:
    """The core venv's Python (no test installs it: scripts/setup.sh does, once)."""
    assert EASYLAUNCH.is_file(), f"{CORE} has no core install: run scripts/setup.sh"
    return PYTHON


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The environment of a user of the core install: their own settings, no PYTHONPATH."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "VIRTUAL_ENV", "EASYLAUNCH_CONFIG")}
    return {**clean, "EASYLAUNCH_CONFIG": settings_file(tmp_path),
            "PATH": f"{CORE / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def run(argv: list[str | Path], env: dict[str, str], cwd: Path | None = None
        ) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def extras() -> dict[str, list[str]]:
    """Each extra of pyproject.toml and its requirements."""
    return tomllib.loads((REPO_DIR / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]


def installed(python: Path) -> set[str]:
    """The distributions a venv holds, as pip compares names."""
    listed = subprocess.run([python, "-c", "import importlib.metadata as m; "
                             "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
                            capture_output=True, text=True, check=True)
    return {import_graph.dist_name(name) for name in listed.stdout.split()}


@pytest.mark.parametrize("venv, extra", [(CORE, None), (DOCS, "docs")])
def test_each_venv_holds_its_extra_and_no_other(venv, extra):
    """(else the tests below would pass for the wrong reason)"""
    assert (venv / "bin" / "python").is_file(), f"no {venv}: run scripts/setup.sh"
    there = installed(venv / "bin" / "python")
    brought = import_graph.requirement_closure(extras()[extra]) if extra else set()
    others = {import_graph.dist_name(r) for name, reqs in extras().items() if name != extra
              for r in reqs} - {"easylaunch"} - brought
    assert {"easylaunch", "cloudpickle", "gitpython", "rich"} <= there
    assert extra is None or {import_graph.dist_name(r) for r in extras()[extra]} <= there
    assert there & others == set()
    where = subprocess.run([venv / "bin" / "python", "-c", "import easylaunch; "
                            "print(easylaunch.__file__)"], capture_output=True, text=True,
                           cwd=venv)
    assert where.stdout.strip() == str(REPO_DIR / "easylaunch" / "__init__.py")  # (editable)


def _commands() -> list[str]:
    """Every command of the parser (``dist info`` and the like as commands of their own)."""
    reference = docs_reference()
    found = reference.commands()
    return [name for name, *_ in found] + [a for _, aliases, *_ in found for a in aliases]


def test_every_commands_help_works_on_a_core_install(core, env, tmp_path):
    commands = _commands()
    assert len(commands) >= 20 and {"preview", "plot", "ui", "dist info"} <= set(commands)
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda c: run([EASYLAUNCH, *c.split(), "--help"], env, tmp_path),
                             commands))
    failed = {c: p.stderr[-300:] for c, p in zip(commands, done, strict=True)
              if p.returncode != 0 or not p.stdout.startswith("usage: easylaunch")}
    assert failed == {}
    bare = run([EASYLAUNCH], env, tmp_path)  # (the usage, as a usage error)
    assert bare.returncode == 2 and "COMMAND" in bare.stdout and not bare.stderr
    assert run([EASYLAUNCH, "--help"], env, tmp_path).returncode == 0


SWEEP = """
    from easylaunch import log_metrics, run_sweep


    def train(doodad_config, variant):
        for step in range(3):
            log_metrics(step=step, loss=variant["lr"] / (step + 1))
        return {"loss": variant["lr"] / 3}


    if __name__ == "__main__":
        jobs = run_sweep(train, variants=[{"lr": lr} for lr in (0.1, 0.2, 0.3)],
                         exp_name="first", mode="local")
        print(sorted(round(job.result(timeout=60)["loss"], 3) for job in jobs))
"""


def test_preview_and_a_first_sweep_work_on_a_core_install(core, env, tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent(SWEEP))
    preview = run([EASYLAUNCH, "preview", script], env, tmp_path)
    assert preview.returncode == 0, preview.stderr
    assert preview.stdout.startswith("dry run: 3 run(s) in mode 'local'")
    assert "Traceback" not in preview.stderr
    swept = run([core, script], env, tmp_path)
    assert swept.returncode == 0, swept.stderr
    assert swept.stdout.splitlines()[-1] == "[0.033, 0.067, 0.1]"
    listed = run([EASYLAUNCH, "ls"], env, tmp_path)
    assert listed.returncode == 0 and listed.stdout.count("succeeded") == 3, listed.stdout
    run_id = listed.stdout.splitlines()[1].split()[0]
    for argv in (["status", run_id], ["logs", run_id], ["config"]):
        done = run([EASYLAUNCH, *argv], env, tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (argv, done.stderr)


# each command that needs an extra, and the extra its one line names
CLI_NEEDS = {
    "plot": (["plot", "first", "--metric", "loss"], "results",
             "easylaunch: error: plot needs pandas and matplotlib: "),
    "ui": (["ui", "--port", "0"], "ui",
           "easylaunch: error: ui needs starlette, uvicorn, jinja2 and pandas: "),
    "submit --mode ec2": (["submit", "--mode", "ec2", "--", "true"], "aws",
                          "easylaunch: error: mode 'ec2' needs boto3: "),
}


@pytest.mark.parametrize("case", CLI_NEEDS)
def test_a_command_that_needs_an_extra_names_it_in_one_line(core, env, tmp_path, case):
    argv, extra, said = CLI_NEEDS[case]
    done = run([EASYLAUNCH, *argv], env, tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(said) and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.rstrip().endswith(f"[{extra}]'")


# each function (or launch) that needs an extra, as Python code, and the extra it names
PYTHON_NEEDS = {
    "load_sweep": ("easylaunch.load_sweep('first')", "results"),
    "load_histories": ("easylaunch.load_histories('first')", "results"),
    "plot_sweep": ("easylaunch.plot_sweep('first', 'loss')", "results"),
    "run_search": ("easylaunch.run_search(f, {'x': [1, 2]}, 'loss', n_trials=2)", "search"),
    "setup_torch": ("import easylaunch.dist; easylaunch.dist.setup_torch()", "torch"),
    "reading TensorBoard files": ("from easylaunch.results.readers import read_tensorboard; "
                                  "read_tensorboard(Path('.'))", "tensorboard"),
    "env_pack": ("from easylaunch.runs.envpack import pack_env; "
                 "pack_env(Path(sys.prefix), Path('env.tar.gz'))", "envpack"),
    **{f"mode {mode}": (f"easylaunch.run_experiment(f, mode={mode!r})", extra)
       for mode, extra in (("ec2", "aws"), ("gcp", "gcp"), ("azure", "azure"), ("aml", "aml"),
                           ("ray", "ray"))},
    **{f"tracker {name}": (f"easylaunch.run_experiment(f, trackers=[{name!r}])", name)
       for name in ("wandb", "mlflow", "tensorboard")},
}
CALL = """
import sys
from pathlib import Path

import easylaunch

def f(doodad_config, variant):
    return 1

try:
    {call}
except easylaunch.MissingExtra as exc:
    print(exc)
"""


@pytest.mark.parametrize("case", PYTHON_NEEDS)
def test_a_function_that_needs_an_extra_raises_missing_extra(core, env, tmp_path, case):
    call, extra = PYTHON_NEEDS[case]
    done = run([core, "-c", CALL.format(call=call)], env, tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert re.fullmatch(rf"\S.* needs .+: \S+ -m pip install .*\[{extra}\]'\n", done.stdout)


def test_the_docs_build_from_the_docs_extra_alone(tmp_path):
    """The docs' hook needs easylaunch's core alone: ``.[docs]`` builds the site."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    built = subprocess.run([DOCS / "bin" / "mkdocs", "build", "--strict", "--quiet",
                            "--site-dir", tmp_path / "site"], cwd=REPO_DIR, capture_output=True,
                           text=True, timeout=300, env=dict(clean, NO_MKDOCS_2_WARNING="1"))
    assert built.returncode == 0, built.stderr[-2000:]
    assert "easylaunch dist info" in (tmp_path / "site/reference/cli/index.html").read_text()
    assert "MissingExtra" in (tmp_path / "site/reference/api/index.html").read_text()


def test_the_core_path_imports_no_optional_library_at_module_level():
    """What ``easylaunch``, the CLI, each command, each mode, the job side and the docs' hook
    import at module level, followed down: none of it imports an extra's library."""
    optional = import_graph.optional_libraries(
        tomllib.loads((REPO_DIR / "pyproject.toml").read_text()))
    assert {"pandas": "results", "numpy": "results", "starlette": "ui", "boto3": "aws",
            "optuna": "search", "hydra": "hydra", "mkdocs": "docs"}.items() <= optional.items()
    path = import_graph.core_path()
    assert {"easylaunch.cli.views", "easylaunch.modes.cloud.ec2", "easylaunch.api.search",
            "easylaunch.results.sweep", "easylaunch_job.trackers"} <= set(path)
    assert [str(i) for i in import_graph.optional_imports(path, optional)] == []
    assert "easylaunch.dashboard.app" not in path  # (the ui extra's: imported by ui alone)


def test_an_optional_import_at_module_level_is_found(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(textwrap.dedent("""
        import os
        from matplotlib import pyplot
        TYPE_CHECKING = False
        if TYPE_CHECKING:
            import pandas
        try:
            import wandb
        except ImportError:
            wandb = None

        def plot():
            import pandas
    """))
    found = import_graph.optional_imports({"m": module}, {"matplotlib": "results",
                                                          "pandas": "results", "wandb": "wandb"})
    assert [str(i) for i in found] == [
        "m (line 3) imports matplotlib at its top; matplotlib comes with the extra 'results': "
        "import it where it is used, with easylaunch.errors.needed"]


def test_a_wheels_init_writes_from_the_top_levels_config_template(core, env, tmp_path):
    """config_template.py at the checkout's top level is the one template: a wheel built from
    the checkout holds it (settings/template.py links to it), and that install's
    ``easylaunch init`` writes its keys, pointing at the copy the wheel holds."""
    built = subprocess.run([REPO_DIR / ".venv" / "bin" / "python", "-m", "pip", "wheel", "-q",
                            "--no-deps", "--no-build-isolation", "-w", tmp_path / "wheel",
                            REPO_DIR], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("easylaunch-*.whl")
    unpacked = tmp_path / "installed"
    zipfile.ZipFile(wheel).extractall(unpacked)
    held = unpacked / "easylaunch" / "settings" / "template.py"
    assert not held.is_symlink() and held.read_text() == \
        (REPO_DIR / "config_template.py").read_text()
    env = {**env, "PYTHONPATH": str(unpacked)}  # (before the editable install: the wheel's)
    done = run([PYTHON, "-m", "easylaunch.cli", "init", tmp_path / "mine.py"], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "mine.py").read_text()
    assert "CODE_DIRS_TO_MOUNT: list = []" in written and "SLURM_CONFIGS" in written
    assert str(held) in written  # (where every other key is: the wheel's own copy)

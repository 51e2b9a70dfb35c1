"""The ``easylaunch`` command's start (issue 40): a command imports the layers it uses and no
other (``--version`` none, ``ls`` none of the launch path), while the parser still has every
command, and ``import easylaunch`` still gives every public name."""

import json
import subprocess
import sys

from conftest import settings_file

import easylaunch
from easylaunch import cli

# runs `easylaunch ARGS...` in this fresh process, then prints the modules it imported
IMPORTED_BY = """
import json, sys
from easylaunch.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""
LAUNCH_PATH = {"easylaunch.api", "easylaunch.api.launch", "easylaunch.api.starting",
               "easylaunch.api.commands", "easylaunch.runs.payload",
               "easylaunch.runs.importable", "easylaunch.modes.hosts",
               "easylaunch.modes.scheduled", "easylaunch.modes.cloud", "easylaunch.dashboard",
               "rich"}


def imported_by(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", IMPORTED_BY, *args], capture_output=True,
                          text=True, timeout=60, check=True)
    return set(json.loads(proc.stdout.splitlines()[-1]))


def test_version_imports_no_layer():
    modules = imported_by("--version")
    assert {m for m in modules if m.startswith("easylaunch")} <= {
        "easylaunch", "easylaunch.cli", "easylaunch.cli.examples", "easylaunch.errors"}
    assert "cloudpickle" not in modules


def test_ls_and_status_import_none_of_the_launch_path(tmp_path, monkeypatch):
    config = settings_file(tmp_path)
    monkeypatch.setenv("EASYLAUNCH_CONFIG", config)
    job = easylaunch.run_command(["true"], "start")
    job.wait(timeout=60)
    for args in (["ls"], ["status", job.id]):
        modules = imported_by("--config", config, *args)
        assert not modules & LAUNCH_PATH, args
        # (only the command's own modules of easylaunch.cli: its --json output's too)
        assert {m for m in modules if m.startswith("easylaunch.cli.")} == {
            "easylaunch.cli.as_json", "easylaunch.cli.examples", "easylaunch.cli.runs",
            "easylaunch.cli.shared"}


def test_the_parser_has_every_command_and_alias():
    commands = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    assert set(commands) == {*cli.COMMAND_MODULES, *cli.COMMAND_ALIASES}
    assert all(commands[alias] is commands[name]
               for alias, name in cli.COMMAND_ALIASES.items())


def test_help_lists_every_command_and_version_goes_after_config(tmp_path):
    run = [sys.executable, "-m", "easylaunch.cli"]
    help_text = subprocess.run([*run, "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert all(f"\n    {name}" in help_text for name in cli.COMMAND_MODULES)
    version = subprocess.run([*run, "--config", settings_file(tmp_path), "--version"],
                             capture_output=True, text=True, check=True)
    assert version.stdout == f"easylaunch {easylaunch.__version__}\n"


def test_every_public_name_and_layer_is_there_after_import_easylaunch():
    names = subprocess.run([sys.executable, "-c", "import easylaunch, json; print(json.dumps("
                            "[n for n in easylaunch.__all__ if getattr(easylaunch, n) is None] "
                            "+ [n for n in easylaunch.__all__ if n not in dir(easylaunch)] "
                            "+ [easylaunch.results.load_sweep.__name__]))"],
                           capture_output=True, text=True, check=True).stdout
    assert json.loads(names) == ["load_sweep"]

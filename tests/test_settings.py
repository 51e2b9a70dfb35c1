"""Settings lookup order, defaults, checks, and the init/config commands."""

import subprocess
import sys
from pathlib import Path

import pytest

from easylaunch import LaunchError, SettingsError
from easylaunch.settings import DEFAULTS, TEMPLATE_PATH, load_settings


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_come_from_the_template():
    settings = load_settings()
    assert settings.path is None
    assert settings.LOCAL_LOG_DIR == DEFAULTS["LOCAL_LOG_DIR"] == "~/easylaunch-logs"
    assert settings.sources["LOCAL_LOG_DIR"].startswith("default")


def test_lookup_order(tmp_path, monkeypatch):
    _write(tmp_path / "home/.config/easylaunch/config.py", "LOCAL_LOG_DIR = 'home'\n")
    assert load_settings().LOCAL_LOG_DIR == "home"
    _write(tmp_path / "easylaunch_config.py", "LOCAL_LOG_DIR = 'cwd'\n")
    assert load_settings().LOCAL_LOG_DIR == "cwd"
    env = _write(tmp_path / "env.py", "LOCAL_LOG_DIR = 'env'\n")
    monkeypatch.setenv("EASYLAUNCH_CONFIG", str(env))
    assert load_settings().LOCAL_LOG_DIR == "env"
    arg = _write(tmp_path / "arg.py", "LOCAL_LOG_DIR = 'arg'\nLOCAL_GPU_IDS = [0]\n")
    settings = load_settings(str(arg))
    assert settings.LOCAL_LOG_DIR == "arg"
    assert settings.sources["LOCAL_LOG_DIR"] == str(arg)
    assert settings.CODE_DIRS_TO_MOUNT == []  # missing names keep their defaults
    assert settings.path == str(arg)


def test_edited_file_is_read_again(tmp_path):
    path = _write(tmp_path / "c.py", "LOCAL_LOG_DIR = 'one'\n")
    assert load_settings(str(path)).LOCAL_LOG_DIR == "one"
    path.write_text("LOCAL_LOG_DIR = 'second'\n")
    assert load_settings(str(path)).LOCAL_LOG_DIR == "second"


def test_broken_settings_file_names_the_file(tmp_path):
    path = _write(tmp_path / "c.py", "LOCAL_LOG_DIR = (\n")
    with pytest.raises(SettingsError, match=f"cannot read settings file {path}"):
        load_settings(str(path))


def test_env_pointing_nowhere(monkeypatch):
    monkeypatch.setenv("EASYLAUNCH_CONFIG", "/nowhere.py")
    with pytest.raises(SettingsError, match="EASYLAUNCH_CONFIG='/nowhere.py' is not a file"):
        load_settings()


@pytest.mark.parametrize("entry, problem", [
    ({"mount_point": "/x"}, "each entry must be dict"),
    ({"local_dir": ".", "mount_point": "relative"}, "must be an absolute path"),
    ({"local_dir": ".", "mount_point": "/x", "extra": 1}, "unknown field"),
    ({"local_dir": "."}, "has no mount_point"),
])
def test_bad_data_mounts(entry, problem):
    with pytest.raises(SettingsError, match=problem):
        load_settings({"NON_CODE_DIRS_TO_MOUNT": [entry]}).data_mounts()


def _easylaunch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easylaunch.cli", *args], capture_output=True,
                          text=True)


def test_init_writes_a_short_file_and_never_overwrites(tmp_path):
    first = _easylaunch("init")
    assert first.returncode == 0, first.stderr
    written = tmp_path / "home/.config/easylaunch/config.py"
    assert f"wrote {written}" in first.stdout and "easylaunch reads it from here" in first.stdout
    text = written.read_text()
    assert "CODE_DIRS_TO_MOUNT: list = []" in text and "SLURM_CONFIGS: dict = dict(" in text
    assert "AWS_REGION" in text and "AWS_REGION:" not in text  # named, not copied
    assert len(text.splitlines()) < 120 and str(TEMPLATE_PATH) in text
    assert dict(load_settings(str(written))) == DEFAULTS  # every value as the defaults
    checked = _easylaunch("doctor", str(written))  # the file init writes passes doctor
    assert checked.returncode == 0 and "error" not in checked.stdout, checked.stdout
    written.write_text("LOCAL_LOG_DIR = 'mine'\n")
    second = _easylaunch("init")
    assert second.returncode == 1
    assert "already exists" in second.stderr
    assert written.read_text() == "LOCAL_LOG_DIR = 'mine'\n"


def test_init_says_when_easylaunch_will_not_find_the_file(tmp_path):
    elsewhere = _easylaunch("init", "mine.py")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "does not look there" in elsewhere.stdout
    assert "EASYLAUNCH_CONFIG=mine.py" in elsewhere.stdout
    (tmp_path / "easylaunch_config.py").write_text("")
    shadowed = _easylaunch("init")
    assert "from here easylaunch reads easylaunch_config.py instead" in shadowed.stdout


def test_config_command_shows_values_and_sources_and_marks_changes(tmp_path):
    _write(tmp_path / "easylaunch_config.py", "LOCAL_LOG_DIR = '/data/logs'\nMAX_RESTARTS = 0\n")
    out = _easylaunch("config").stdout
    assert "\n* LOCAL_LOG_DIR = '/data/logs'  # from easylaunch_config.py\n" in out
    assert "\n  MAX_RESTARTS = 0  # from easylaunch_config.py\n" in out  # as the default
    assert "\n  CODE_DIRS_TO_MOUNT = []  # from default" in out
    assert "* marks the 1 value(s) that differ" in out
    changed = _easylaunch("config", "--changed").stdout.splitlines()
    assert changed[1:] == ["* LOCAL_LOG_DIR = '/data/logs'  # from easylaunch_config.py"]


def test_options_go_anywhere_and_the_help_reads_as_plain_text(tmp_path):
    _write(tmp_path / "other.py", "LOCAL_LOG_DIR = '/other'\n")
    for args in (("--config", "other.py", "config"), ("config", "--config", "other.py")):
        out = _easylaunch(*args)
        assert out.returncode == 0 and "LOCAL_LOG_DIR = '/other'" in out.stdout, out.stderr
    for args in ((), ("ls",), ("config",), ("init",)):
        shown = _easylaunch(*args, "--help").stdout
        assert "--config" in shown and "``" not in shown


def test_version_command():
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("easylaunch ")


def test_extra_singularity_args_as_a_list_are_taken_as_one_string():
    settings = load_settings({"BRC_EXTRA_SINGULARITY_ARGS": ["--writable", "-B", "/a b"]})
    assert settings.BRC_EXTRA_SINGULARITY_ARGS == "--writable -B '/a b'"


def test_install_hints_name_the_install_that_works_where_easylaunch_is(monkeypatch, tmp_path):
    from easylaunch import errors as extras

    assert extras.install_hint("ui").endswith(f"-m pip install -e '{extras.CHECKOUT}[ui]'")
    monkeypatch.setattr(extras, "CHECKOUT", tmp_path)  # (installed from a package index)
    assert extras.install_hint("ui").endswith("-m pip install 'easylaunch[ui]'")


def test_a_library_not_installed_names_what_needs_it_and_the_install():
    from easylaunch import LaunchError
    from easylaunch import errors as extras

    with pytest.raises(LaunchError, match=r"^mode 'ray' needs Ray's job client: .*\[ray\]'$"):
        extras.needed("easylaunch_no_such_module", "mode 'ray'", "ray", "Ray's job client")
    assert extras.needed("json", "mode 'x'", "x").dumps([1]) == "[1]"


def test_doctor_without_a_settings_file_still_checks_each_mode():
    checked = _easylaunch("doctor")
    assert checked.returncode == 0, checked.stdout
    assert "no settings file found" in checked.stdout
    assert "mode sss: SSS_CPU_IMAGE / SSS_GPU_IMAGE" in checked.stdout  # the defaults, checked
    assert "mode slurm: commands on PATH" in checked.stdout or \
        "mode slurm: not on PATH" in checked.stdout


def _slurm_settings(tmp_path: Path, configs: str) -> Path:
    """A user's settings file: their folders and SLURM_CONFIGS as they write it."""
    tests = Path(__file__).resolve().parent
    return _write(tmp_path / "settings.py",
                  f"LOCAL_LOG_DIR = {str(tmp_path / 'logs')!r}\n"
                  f"CODE_DIRS_TO_MOUNT = [{str(tests)!r}]\n"
                  f"REGISTRY_PATH = {str(tmp_path / 'registry.sqlite3')!r}\n"
                  f"SLURM_CONFIGS = {configs}\n")


def test_a_slurm_config_with_only_its_partition_launches(tmp_path, slurm_cluster):
    import jobfns

    from easylaunch import run_experiment

    settings = _slurm_settings(tmp_path, '{"cpu": dict(partition="debug")}')
    cpu = load_settings(settings).SLURM_CONFIGS["cpu"]
    assert cpu == {**DEFAULTS["SLURM_CONFIGS"]["cpu"], "partition": "debug"}
    job = run_experiment(jobfns.train, mode="slurm", exp_name="partition-only",
                         variant={"learning_rate": 3}, config=str(settings))
    assert job.result(timeout=120)["lr"] == 3
    shown = subprocess.run(["scontrol", "show", "job", job.launch_info["backend"]
                            ["slurm_job_id"]], capture_output=True, text=True).stdout
    assert "Partition=debug" in shown and "TimeLimit=01:00:00" in shown, shown


def test_a_config_entry_missing_fields_takes_the_template_entry_s():
    s = load_settings({"SLURM_CONFIGS": {"big": dict(n_gpus=2, partition="gpu")},
                       "PBS_CONFIGS": {"gpu": dict(queue="debug"), "wide": dict(ncpus=64)}})
    assert s.SLURM_CONFIGS["big"] == {**DEFAULTS["SLURM_CONFIGS"]["gpu"], "n_gpus": 2,
                                      "partition": "gpu"}
    assert s.PBS_CONFIGS["gpu"] == {**DEFAULTS["PBS_CONFIGS"]["gpu"], "queue": "debug"}
    assert s.PBS_CONFIGS["wide"] == {**DEFAULTS["PBS_CONFIGS"]["cpu"], "ncpus": 64}


@pytest.mark.parametrize("key, configs, problem", [
    ("SLURM_CONFIGS", '{"cpu": dict(partition="debug", time_in_mins=-3)}',
     'SLURM_CONFIGS["cpu"]["time_in_mins"] = -3 in {file}: must be a positive number of minutes'),
    ("SLURM_CONFIGS", '{"gpu": dict(n_gpus="two")}',
     'SLURM_CONFIGS["gpu"]["n_gpus"] = \'two\' in {file}: must be a whole number, 0 or more'),
    ("SLURM_CONFIGS", '{"cpu": dict(mem="lots")}',
     'SLURM_CONFIGS["cpu"]["mem"] = \'lots\' in {file}: must be an amount sbatch reads'),
    ("SLURM_CONFIGS", '{"cpu": dict(gpus=1)}',
     'SLURM_CONFIGS["cpu"] in {file}: unknown field \'gpus\'; did you mean \'n_gpus\'?'),
    ("PBS_CONFIGS", '{"cpu": dict(walltime="soon")}',
     'PBS_CONFIGS["cpu"]["walltime"] = \'soon\' in {file}: must be a positive number of '
     'minutes or a PBS walltime'),
    ("PBS_CONFIGS", '{"cpu": dict(queue="a b")}',
     'PBS_CONFIGS["cpu"]["queue"] = \'a b\' in {file}: must be one word'),
])
def test_a_bad_config_value_names_the_entry_and_field_as_written(tmp_path, key, configs,
                                                                  problem):
    settings = _write(tmp_path / "settings.py", f"{key} = {configs}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(settings)
    assert str(caught.value).startswith(problem.format(file=settings)), caught.value


def test_a_bad_config_value_gets_one_message_from_the_settings_file_and_from_a_launch(tmp_path):
    """One place checks a scheduler entry's fields: a settings file's value and the same value
    given at launch are refused alike, only the source differs."""
    from easylaunch.modes.schedulers import slurm
    from easylaunch.settings.entries import LAUNCH_SOURCE

    file = tmp_path / "settings.py"
    file.write_text("SLURM_CONFIGS = {'cpu': {'mem': 'lots'}}\n")
    with pytest.raises(SettingsError) as from_file:
        load_settings(str(file))
    with pytest.raises(LaunchError) as at_launch:
        slurm.resolve_resources({"cpu": {"mem": "lots"}}, "cpu", False)
    assert str(from_file.value) == str(at_launch.value).replace(LAUNCH_SOURCE, str(file))

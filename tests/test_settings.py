"""Settings lookup order, defaults, checks, and the init/config commands."""

import subprocess
import sys
from pathlib import Path

import pytest

from easylaunch import SettingsError
from easylaunch.settings import DEFAULTS, load_settings


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


def test_init_writes_the_template_and_never_overwrites(tmp_path):
    cmd = [sys.executable, "-m", "easylaunch.cli", "init"]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    written = tmp_path / "home/.config/easylaunch/config.py"
    assert "CODE_DIRS_TO_MOUNT" in written.read_text()
    written.write_text("LOCAL_LOG_DIR = 'mine'\n")
    second = subprocess.run(cmd, capture_output=True, text=True)
    assert second.returncode == 1
    assert "already exists" in second.stderr
    assert written.read_text() == "LOCAL_LOG_DIR = 'mine'\n"


def test_config_command_shows_values_and_sources(tmp_path):
    _write(tmp_path / "easylaunch_config.py", "LOCAL_LOG_DIR = '/data/logs'\n")
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "config"],
                         capture_output=True, text=True, check=True).stdout
    assert "LOCAL_LOG_DIR = '/data/logs'  # from easylaunch_config.py" in out
    assert "CODE_DIRS_TO_MOUNT = []  # from default" in out


def test_version_command():
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("easylaunch ")

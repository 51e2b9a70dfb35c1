"""Bad input gets a clear error before anything starts, and leaves no run folder behind."""

import os
import socket
import subprocess
import sys
import threading
import warnings

import jobfns
import pytest

from easylaunch import LaunchError, SettingsError, run_experiment, run_sweep


def _nothing_made(cfg):
    logs = cfg["LOCAL_LOG_DIR"]
    return not os.path.exists(logs) or not any(
        name for name in os.listdir(logs) if name != ".snapshots")


def test_unpicklable_function(cfg):
    lock = threading.Lock()
    with pytest.raises(LaunchError, match="the function's captured variable 'lock' cannot be "
                                          "pickled.*inside the function"):
        run_experiment(lambda c, v: lock.acquire(), config=cfg)
    assert _nothing_made(cfg)


@pytest.mark.parametrize("make, kind", [
    (threading.Lock, "_thread.lock"), (lambda: (i for i in range(3)), "generator"),
    (socket.socket, "socket")])
def test_unpicklable_variant_names_its_key(cfg, make, kind):
    value = make()
    with pytest.raises(LaunchError, match=rf'variants\[1\]\["opts"\]\[0\]\["x"\] cannot be '
                                          rf"pickled.*{kind}.*inside the function"):
        run_sweep(jobfns.train, [{"a": 1}, {"opts": [{"x": value}]}], config=cfg)
    if isinstance(value, socket.socket):
        value.close()
    assert _nothing_made(cfg)


@pytest.mark.parametrize("mode", ["r", "rb", "a"])
def test_an_open_file_in_a_variant_is_refused_with_its_key_and_path(cfg, tmp_path, mode):
    data = tmp_path / "train.csv"
    data.write_text("x,y\n1,2\n")
    with open(data, mode) as fh, pytest.raises(LaunchError) as refused:
        run_experiment(jobfns.echo, variant={"data": {"fh": fh, "rows": 1}}, config=cfg)
    assert str(refused.value) == (
        'variants[0]["data"]["fh"] is an open file: it cannot reach a run as the file (at most '
        f"a copy of its text would, as a StringIO). Pass its path instead ({str(data)!r}) and "
        "open it inside the function.")
    assert _nothing_made(cfg)


def test_a_function_holding_an_open_file_is_refused(cfg, tmp_path):
    fh = open(tmp_path / "log.txt", "w")  # noqa: SIM115 - open while the launch is refused
    try:
        with pytest.raises(LaunchError, match="the function's captured variable 'fh' is an "
                                              "open file.*Pass its path instead"):
            run_experiment(lambda c, v: fh.write("x"), config=cfg)
    finally:
        fh.close()
    assert _nothing_made(cfg)


def test_unknown_mode_lists_known_modes(cfg):
    with pytest.raises(LaunchError, match="unknown mode 'locl'; did you mean 'local'\\?; "
                                          "known modes: .*here_no_doodad"):
        run_experiment(jobfns.train, mode="locl", config=cfg)


def test_unknown_mode_option(cfg):
    with pytest.raises(LaunchError, match="does not take the option.*max_paralel.*max_parallel"):
        run_experiment(jobfns.train, mode="local", config=cfg, max_paralel=2)
    with pytest.raises(LaunchError, match="max_parallel must be a positive integer"):
        run_experiment(jobfns.train, mode="local", config=cfg, max_parallel=0)
    assert _nothing_made(cfg)


@pytest.mark.parametrize("name", ["a/b", "..", "../up", "x..y", "a b", "$(id)", "a;b", "`x`",
                                  "", ".hidden", "x" * 101, "new\nline"])
def test_unsafe_exp_names_are_refused(cfg, name):
    with pytest.raises(LaunchError, match="exp_name"):
        run_experiment(jobfns.train, exp_name=name, config=cfg)
    assert _nothing_made(cfg)


@pytest.mark.parametrize("variant, problem", [
    ({"lr.x": 1}, "contains '.'"),
    ({"nested": {"a.b": 1}}, "nested/a.b"),
    ({"doodad_config": 1}, "reserved"),
    ([1, 2], "must be a dict"),
])
def test_bad_variants_are_refused(cfg, variant, problem):
    with pytest.raises(LaunchError, match=problem):
        run_experiment(jobfns.train, variant=variant, config=cfg)
    assert _nothing_made(cfg)


def test_missing_code_dir(cfg, tmp_path):
    cfg["CODE_DIRS_TO_MOUNT"] = [str(tmp_path / "nope")]
    with pytest.raises(SettingsError, match="CODE_DIRS_TO_MOUNT.*nope.*not an existing folder"):
        run_experiment(jobfns.train, config=cfg)
    assert _nothing_made(cfg)


def test_mistyped_setting_value(cfg):
    cfg["CODE_DIRS_TO_MOUNT"] = "/a/string/not/a/list"
    with pytest.raises(SettingsError, match="CODE_DIRS_TO_MOUNT must be list, got str"):
        run_experiment(jobfns.train, config=cfg)


def test_misspelled_setting_warns_with_the_closest_key(cfg):
    cfg["LOCAL_LOG_DIRR"] = "/tmp/x"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_experiment(jobfns.train, config=cfg, mode="here_no_doodad")
    assert any("unknown setting LOCAL_LOG_DIRR; did you mean 'LOCAL_LOG_DIR'?" in str(w.message)
               for w in caught)


def test_use_gpu_without_gpus(cfg, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(LaunchError, match="use_gpu=True but no GPU was found"):
        run_experiment(jobfns.train, use_gpu=True, config=cfg)
    assert _nothing_made(cfg)


def test_gpu_id_must_be_a_known_gpu(cfg):
    cfg["LOCAL_GPU_IDS"] = [0, 1]
    with pytest.raises(LaunchError, match="gpu_id=5 is not one of this machine's GPUs"):
        run_experiment(jobfns.train, use_gpu=True, gpu_id=5, config=cfg)


def test_empty_sweep_and_non_callable(cfg):
    with pytest.raises(LaunchError, match="variants is empty"):
        run_sweep(jobfns.train, [], config=cfg)
    with pytest.raises(LaunchError, match="method_call must be a function"):
        run_experiment("train", config=cfg)


def test_missing_settings_file():
    with pytest.raises(SettingsError, match="config='/no/such.py' is not a file"):
        run_experiment(jobfns.train, config="/no/such.py")


def test_snapshot_size_limit_names_the_largest_files(cfg, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "weights.bin").write_bytes(b"\0" * (2 * 2**20))
    (code / "model.py").write_text("x = 1\n")
    cfg.update(CODE_DIRS_TO_MOUNT=[str(code), *cfg["CODE_DIRS_TO_MOUNT"]], CODE_SNAPSHOT_MAX_MB=1)
    with pytest.raises(LaunchError, match=r"weights.bin \(2.0 MB\).*CODE_SNAPSHOT_MAX_MB"):
        run_experiment(jobfns.train, config=cfg)
    assert _nothing_made(cfg)


def test_a_function_the_runs_could_not_import_is_refused_first(tmp_path):
    """A module found only through a sys.path entry the runs will not have is named, with
    the folder to add, before anything is made."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "far_module.py").write_text("def train(doodad_config, variant):\n    return 1\n")
    logs = str(tmp_path / "logs")
    code = (f"import sys; sys.path.insert(0, {str(elsewhere)!r}); import far_module\n"
            "from easylaunch import run_experiment\n"
            f"run_experiment(far_module.train, config={{'LOCAL_LOG_DIR': {logs!r}}})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 1
    assert (f"module 'far_module' is in {elsewhere}" in out.stderr
            and f"add {elsewhere} to CODE_DIRS_TO_MOUNT" in out.stderr)
    assert not (tmp_path / "logs").exists()
    closure = code.replace("far_module.train,", "far_module.make(),")  # (travels by value)
    (elsewhere / "far_module.py").write_text(
        "def make():\n    def train(doodad_config, variant):\n        return 42\n"
        "    return train\n")
    out = subprocess.run([sys.executable, "-c", closure + ".result(timeout=60)"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr


def test_a_module_beside_the_launching_script_travels_by_value(tmp_path):
    """``from my_exp import train`` next to the script runs (the module is sent whole), and
    its traceback shows the module's lines."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_exp.py").write_text(
        "SCALE = 10\n\ndef train(doodad_config, variant):\n"
        "    return SCALE / variant['y']  # the module's line\n")
    (project / "launch.py").write_text(
        "import sys\nfrom my_exp import train\nfrom easylaunch import run_sweep\n"
        "ok, bad = run_sweep(train, [{'y': 2}, {'y': 0}], config={'LOCAL_LOG_DIR': sys.argv[1]})\n"
        "print(ok.result(timeout=60))\nbad.wait(timeout=60)\nprint(bad.info()['error'])\n")
    out = subprocess.run([sys.executable, str(project / "launch.py"), str(tmp_path / "logs")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("5.0\n")
    assert f'File "{project / "my_exp.py"}", line 4, in train' in out.stdout
    assert "# the module's line" in out.stdout


def test_a_module_beside_the_script_imported_in_the_body_travels_by_value(tmp_path):
    """``import my_helper`` inside the function reaches a run that cannot import it by name
    (it runs from another folder); a module there that cannot be pickled (a lock) does not
    stop the launch: the run imports it by name, as before."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_helper.py").write_text("def scale(y):\n    return y * 10\n")
    (project / "locked.py").write_text("import threading\nLOCK = threading.Lock()\n")
    (project / "launch.py").write_text(
        "import sys\nfrom easylaunch import run_experiment\n"
        "def train(doodad_config, variant):\n    import my_helper\n"
        "    return my_helper.scale(variant['y'])\n"
        "def locked(doodad_config, variant):\n    import locked\n    return 1\n"
        "cfg = {'LOCAL_LOG_DIR': sys.argv[1]}\n"
        "print(run_experiment(train, variant={'y': 2}, config=cfg).result(timeout=60))\n"
        "print(run_experiment(locked, config=cfg).wait(timeout=60))\n")
    out = subprocess.run([sys.executable, str(project / "launch.py"), str(tmp_path / "logs")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["20", "failed"], out.stdout


def test_a_misspelt_launch_keyword_names_the_right_one(cfg):
    with pytest.raises(LaunchError, match="'use_gpus'; did you mean 'use_gpu'"):
        run_experiment(jobfns.train, config=cfg, use_gpus=True)
    assert _nothing_made(cfg)

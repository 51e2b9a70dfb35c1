"""doodad users switch by changing an import: their config files, keys, modes and call sites.

The configs in fixtures/doodad/ are real files from public repositories (each names its source);
tests append lines that replace only the machine paths that cannot exist here.
"""

import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import jobfns
import pytest
from helpers import copy_to_cluster

from easylaunch import JobState, LaunchError, SettingsError, run_experiment, run_sweep
from easylaunch.cli import main as cli
from easylaunch.modes import get_mode
from easylaunch.modes.schedulers import slurm as scheduler
from easylaunch.runs.record import LaunchRequest
from easylaunch.settings import load_settings

TESTS_DIR = Path(__file__).resolve().parent
FIXTURES = TESTS_DIR / "fixtures" / "doodad"
USER_CONFIGS = ["brc_config_private.py", "montrealrobotics_config.py",
                "rlkit_config_private.py"]


def doodad_config(tmp_path, name, **paths):
    """The fixture with this machine's paths appended (as a user would edit them)."""
    text = (FIXTURES / name).read_text()
    paths = {"LOCAL_LOG_DIR": str(tmp_path / "logs"), "CODE_DIRS_TO_MOUNT": [str(TESTS_DIR)],
             **paths}
    text += "\n# this machine's paths\n" + "".join(f"{k} = {v!r}\n" for k, v in paths.items())
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", USER_CONFIGS)
def test_real_doodad_configs_load_without_warnings(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_settings(FIXTURES / name)


def test_doodad_keys_land_on_easylaunch_keys():
    s = load_settings(FIXTURES / "brc_config_private.py")
    assert s.SSS_CPU_IMAGE == "/global/home/groups/co_rail/anair17/railrl_hand_v2"  # SSS_IMAGE
    assert (s.AWS_INSTANCE_TYPE, s.AWS_SPOT_PRICE) == ("c4.large", 0.1)
    assert (s.AWS_GPU_INSTANCE_TYPE, s.AWS_GPU_SPOT_PRICE) == ("g3.4xlarge", 1.0)
    assert s.DOCKER_IMAGE == "anair17/railrl-dice-v1"
    assert s.GCP_GCS_PATH == "gs://patrick-gcp-bucket"
    assert s.GCP_IMAGE == "ashvin-torch4cuda9"
    assert "*.csv" in s.GCP_FILE_PATTERNS_TO_SAVE
    assert s.SINGULARITY_IMAGE.endswith("railrl-hand-v1a-sandbox")
    assert s.sources["SSS_CPU_IMAGE"].endswith("brc_config_private.py")
    mr = load_settings(FIXTURES / "montrealrobotics_config.py")
    assert mr.BRC_EXTRA_SINGULARITY_ARGS == "--writable-tmpfs"  # EXTRA_SINGULARITY_ARGS
    template_todo = load_settings(FIXTURES / "rlkit_config_private.py")
    assert template_todo.AWS_S3_PATH is None  # 'TODO' reads as not set


def test_doodad_gcp_default_kwargs_spread_onto_gcp_keys(tmp_path):
    s = load_settings({"GCP_DEFAULT_KWARGS": dict(
        zone="us-west1-b", instance_type="n1-standard-8", image_project="proj", terminate=True,
        preemptible=True, gpu_kwargs=dict(gpu_model="nvidia-tesla-p100", num_gpu=2))})
    assert (s.GCP_ZONE, s.GCP_MACHINE_TYPE, s.GCP_IMAGE_PROJECT, s.GCP_PREEMPTIBLE,
            s.GCP_GPU_TYPE, s.GCP_GPU_COUNT) == ("us-west1-b", "n1-standard-8", "proj", True,
                                                 "nvidia-tesla-p100", 2)


def test_doodads_own_template_names_the_line_to_delete():
    with pytest.raises(SettingsError, match=r"imports doodad at line 133 \(from doodad.utils "
                                            r"import REPO_DIR\).*delete that line"):
        load_settings(FIXTURES / "doodad_template_config.py")


@pytest.mark.parametrize("values, problem", [
    ({"SPOT_PRICE": "cheap"}, r"SPOT_PRICE \(easylaunch's AWS_SPOT_PRICE\) must be float"),
    ({"INSTANCE_TYPE": "c4.large", "AWS_INSTANCE_TYPE": "c5.large"},
     "INSTANCE_TYPE and AWS_INSTANCE_TYPE both set AWS_INSTANCE_TYPE, to 'c4.large' and "
     "'c5.large'"),
    ({"GCP_DEFAULT_KWARGS": dict(zone="z", gpu_kwargs=dict(gpu_modl="k80"))},
     "unknown field 'gpu_kwargs.gpu_modl'; did you mean 'gpu_kwargs.gpu_model'"),
    ({"DIR_AND_MOUNT_POINT_MAPPINGS": "/data"}, "DIR_AND_MOUNT_POINT_MAPPINGS must be a list"),
])
def test_bad_doodad_values_name_the_key_written(values, problem):
    with pytest.raises(SettingsError, match=problem):
        load_settings(values)


def test_slurm_config_fields_doodad_users_write():
    configs = load_settings(FIXTURES / "brc_config_private.py").SLURM_CONFIGS
    res = scheduler.resolve_resources(configs, "gpu", True)
    header = scheduler.sbatch_header(res, "j", "/o/%j.out", 0)
    assert "#SBATCH --gres=gpu:TITAN:1" in header  # gpu_string=":TITAN"
    montreal = load_settings(FIXTURES / "montrealrobotics_config.py").SLURM_CONFIGS
    res = scheduler.resolve_resources(montreal, "cpu", False)
    assert res.time_minutes == 60  # "1:00:00"
    assert "#SBATCH --mem=8G" in scheduler.sbatch_header(res, "j", "/o/%j.out", 0)  # "8Gb"
    for text, minutes in (("90", 90), ("1:30", 2), ("2-00:00:00", 2880), ("1-1", 1500)):
        assert scheduler.time_minutes(text, "t") == minutes


@pytest.mark.parametrize("name", USER_CONFIGS)
def test_real_configs_launch_local_with_doodads_call(tmp_path, name):
    config = doodad_config(tmp_path, name, NON_CODE_DIRS_TO_MOUNT=[],
                           DIR_AND_MOUNT_POINT_MAPPINGS=[])
    job = run_experiment(jobfns.echo, mode="local", exp_name="port", variant={"seed": 1},
                         config=str(config), gpu_id=0, use_gpu=False, skip_wait=False,
                         verbose=True, num_exps_per_instance=1)
    assert job.done()  # skip_wait=False: doodad's blocking local
    out = job.result()
    assert out["config"]["exp_name"] == time.strftime("%y-%m-%d-port")
    assert out["config"]["gpu_id"] == 0
    assert out["config"]["extra_launch_info"]["base_exp_name"] == "port"


def test_keywords_doodad_ignored_are_ignored_with_one_line_and_typos_refused(cfg, capfd):
    job = run_experiment(jobfns.train, mode="here_no_doodad", config=cfg, time_in_mins=30,
                         region="us-west-2", ssh_host="blue", gcp_kwargs=None)
    assert job.status() is JobState.SUCCEEDED
    err = capfd.readouterr().err
    assert "mode 'here_no_doodad' ignores time_in_mins, region, ssh_host, gcp_kwargs" in err
    with pytest.raises(LaunchError, match="'time_in_min'; did you mean 'time_in_mins'"):
        run_experiment(jobfns.train, mode="local", config=cfg, time_in_min=30)
    with pytest.raises(LaunchError, match="local_input_dir_to_mount_point_dict is not supp"):
        run_experiment(jobfns.train, config=cfg, local_input_dir_to_mount_point_dict={"a": "/b"})


def test_keywords_set_settings_where_doodad_read_them(cfg):
    from easylaunch.settings import doodad_names as doodad

    settings, options, ignored = doodad.split_call_keywords(
        "ec2", {"region": "us-west-2", "spot_price": 0.2, "instance_type": "c5.xlarge",
                "num_exps_per_instance": 4, "time_in_mins": 9}, {"num_exps_per_instance": None})
    assert settings["AWS_REGION"] == "us-west-2" and settings["AWS_GPU_SPOT_PRICE"] == 0.2
    assert settings["AWS_INSTANCE_TYPE"] == "c5.xlarge"
    assert options == {"num_exps_per_instance": 4} and ignored == ["time_in_mins"]


def test_doodads_ssh_mode_takes_its_host_as_doodad_named_it(cfg):
    with pytest.raises(LaunchError, match="mode 'ssh' needs a machine: .*SSH_DEFAULT_HOST"):
        run_experiment(jobfns.train, mode="ssh", config=cfg)
    cfg["SSH_HOSTS"] = {"blue": {"username": "me", "hostname": "blue.invalid"}}
    with pytest.raises(LaunchError, match=r"cluster 'blue' \(me@blue.invalid\).*unknown"):
        run_experiment(jobfns.train, mode="ssh", config=cfg, ssh_host="blue")


def _launch_from_pool(args):
    config, index = args
    job = run_experiment(jobfns.train, mode="local", variant={"learning_rate": index},
                         config=config)
    return str(job.log_dir)


def test_runs_launched_from_a_multiprocessing_pool_finish(cfg):
    with multiprocessing.get_context("fork").Pool(2) as pool:
        folders = pool.map(_launch_from_pool, [(cfg, i) for i in range(3)])
    from easylaunch import Job

    assert [Job.from_run_dir(f).status() for f in folders] == [JobState.SUCCEEDED] * 3


def test_a_loop_of_htp_calls_is_one_task_file_and_one_allocation(cfg, tmp_path):
    cfg.update(SSS_LOG_DIR="/global/scratch/me/logs", HTP_RUNNER="ht_helper",
               TASKFILE_PATH_ON_BRC="/global/scratch/me/taskfile_from_doodad.sh",
               SSS_SCRIPT_PATH=str(tmp_path / "script_to_scp_over.sh"),
               SLURM_CONFIGS=dict(cpu=dict(account_name="fc_rail", partition="savio",
                                           max_num_cores_per_node=20, n_gpus=0)))
    jobs = [run_experiment(jobfns.train, mode="htp", exp_name="loop", variant={"seed": i},
                           config=cfg, time_in_mins=30) for i in range(5)]
    batches = {j.launch_info["backend"]["batch_dir"] for j in jobs}
    assert len(batches) == 1
    batch = Path(batches.pop())
    assert len((batch / "tasks.txt").read_text().splitlines()) == 5
    seed = (tmp_path / "script_to_scp_over.sh").read_text().splitlines()
    assert len(seed) == 1 and " -t 30 " in seed[0] and " -n 5 " in seed[0]
    assert "ht_helper.sh" in seed[0]
    assert [j.launch_info["backend"]["task_index"] for j in jobs] == list(range(5))


def test_local_singularity_runs_in_the_image_with_data_bound(tmp_path, stand_in):
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text("good")
    mount_point = tmp_path / "in-container/data"
    config = doodad_config(tmp_path, "brc_config_private.py", SINGULARITY_IMAGE=str(stand_in),
                           SINGULARITY_PYTHON=sys.executable, SINGULARITY_PRE_CMDS=[],
                           BRC_EXTRA_SINGULARITY_ARGS="", NON_CODE_DIRS_TO_MOUNT=[dict(
                               local_dir=str(data), mount_point=str(mount_point))],
                           DIR_AND_MOUNT_POINT_MAPPINGS=[])
    jobs = run_sweep(jobfns.check_data, [{"mount_point": str(mount_point)}] * 2,
                     mode="local_singularity", config=str(config))
    assert [j.result(timeout=60) for j in jobs] == ["good", "good"]
    assert not mount_point.exists() or not any(mount_point.iterdir())  # bound, not linked
    assert jobs[0].launch_info["backend"]["pid"]  # tracked as local runs are


def test_doctor_checks_the_image_through_spython(tmp_path, stand_in, capsys):
    config = doodad_config(tmp_path, "brc_config_private.py", SINGULARITY_IMAGE=str(stand_in),
                           SINGULARITY_PYTHON=sys.executable)
    assert cli(["doctor", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"SINGULARITY_IMAGE {stand_in} runs Python" in out
    assert "SSS_IMAGE is not used: SSS_GPU_IMAGE and SSS_CPU_IMAGE are set" in out
    assert "SSS_RUN_DOODAD_EXPERIMENT_SCRIPT_PATH: not needed" in out
    assert "mode local_singularity: commands on PATH" in out


def test_doctor_exits_non_zero_on_errors_and_names_unknown_keys(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("SPOT_PRICE = 'cheap'\nSSS_LOG_DIRR = '/x'\n")
    assert cli(["doctor", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "SSS_LOG_DIRR: unknown setting, ignored; did you mean 'SSS_LOG_DIR'?" in out
    assert "error  " in out and "SPOT_PRICE (easylaunch's AWS_SPOT_PRICE) must be" in out


def test_local_docker_command_line(cfg, tmp_path, monkeypatch):
    """No engine can run an image here (no registry is reachable): the command is checked."""
    from easylaunch.settings import override

    settings = override(load_settings(cfg), {"DOCKER_IMAGE": "me/img:1",
                                             "DOCKER_ENGINE": "podman"}, "test")
    mode = get_mode("local_docker").create(settings, {})
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    request = LaunchRequest(method_call=None, variants=[{}], exp_name="d", use_gpu=True,
                            gpu_id=None, log_root=tmp_path / "logs", slurm_config_name=None,
                            script_name="")
    (command,) = mode.prepare(request, [SimpleNamespace(bundle_dir="/logs/b", code_dirs=[])])
    argv = command.argv
    uid = f"{os.getuid()}:{os.getgid()}"
    assert argv == ["/usr/bin/podman", "run", "--rm", "--init", "--user", uid, "-w",
                    str(tmp_path / "logs"), "-v", f"{tmp_path / 'logs'}:{tmp_path / 'logs'}",
                    "-e", "PYTHONPATH", "-e", "PYTHONUNBUFFERED", "-e", "CUDA_VISIBLE_DEVICES",
                    "-e", "EASYLAUNCH_GPU_ID", "--gpus", "all", "me/img:1", "python3",
                    "/logs/b/job.pyz", "run", "/logs/b"]
    monkeypatch.undo()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(LaunchError, match="needs docker or podman on PATH"):
        run_experiment(jobfns.train, mode="local_docker", config=dict(cfg, DOCKER_IMAGE="x"))


def test_sss_from_a_real_config_runs_on_slurm_with_the_cluster_copy_of_code(
        tmp_path, stand_in, slurm_cluster):
    cluster_code = tmp_path / "cluster/code/tests"
    shutil.copytree(TESTS_DIR, cluster_code, ignore=shutil.ignore_patterns("__pycache__"))
    (cluster_code / "where_am_i.py").write_text("WHERE = 'cluster copy'\n")
    config = doodad_config(
        tmp_path, "brc_config_private.py", SSS_SUBMIT=False,
        SSS_LOG_DIR=str(tmp_path / "cluster/logs"),
        SSS_IMAGE=str(stand_in), SSS_CPU_IMAGE=str(stand_in), SSS_GPU_IMAGE=str(stand_in),
        SSS_PYTHON=sys.executable, SSS_PRE_CMDS=[], BRC_EXTRA_SINGULARITY_ARGS="",
        SSS_SCRIPT_PATH=str(tmp_path / "seed.sh"), SSS_NON_CODE_DIRS_TO_MOUNT=[],
        SSS_DIR_AND_MOUNT_POINT_MAPPINGS=[],
        CODE_DIRS_TO_MOUNT=[dict(local_dir=str(TESTS_DIR), mount_point="/code/tests")],
        SSS_CODE_DIRS_TO_MOUNT=[dict(local_dir=str(cluster_code), mount_point="/code/tests")],
        SLURM_SIGNAL_SECONDS=30, SLURM_CONFIGS=dict(cpu=dict(  # this cluster's partition
            n_gpus=0, max_num_cores_per_node=os.cpu_count(), time_in_mins=720)))
    jobs = [run_experiment(jobfns.which_code, mode="sss", variant={"i": i}, config=str(config),
                           slurm_config_name="cpu", time_in_mins=5) for i in range(2)]
    cluster = copy_to_cluster(jobs[0])
    assert "#SBATCH --time=5" in Path(cluster, f"{jobs[0].id}.sbatch").read_text()
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True)
    results = [j.result(timeout=120) for j in jobs]
    assert all(r["where"] == "cluster copy" for r in results)
    assert all(r["slurm_job_id"] for r in results)


def test_doodads_readme_setup_runs_the_cluster_copy_where_the_two_copies_differ(
        tmp_path, stand_in, slurm_cluster):
    # doodad's README: the laptop's repository in CODE_DIRS_TO_MOUNT, the cluster's clone of
    # it (same folder name, another path) in SSS_CODE_DIRS_TO_MOUNT, both as plain strings
    laptop, cluster_code = tmp_path / "laptop/git/tests", tmp_path / "cluster/git/tests"
    for folder, where in ((laptop, "laptop copy"), (cluster_code, "cluster copy")):
        shutil.copytree(TESTS_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / "where_am_i.py").write_text(f"WHERE = {where!r}\n")
    config = doodad_config(
        tmp_path, "brc_config_private.py", SSS_SUBMIT=False,
        SSS_LOG_DIR=str(tmp_path / "cluster/logs"),
        SSS_IMAGE=str(stand_in), SSS_CPU_IMAGE=str(stand_in), SSS_GPU_IMAGE=str(stand_in),
        SSS_PYTHON=sys.executable, SSS_PRE_CMDS=[], BRC_EXTRA_SINGULARITY_ARGS="",
        SSS_SCRIPT_PATH=str(tmp_path / "seed.sh"), SSS_NON_CODE_DIRS_TO_MOUNT=[],
        SSS_DIR_AND_MOUNT_POINT_MAPPINGS=[], CODE_DIRS_TO_MOUNT=[f"{laptop}/"],
        SSS_CODE_DIRS_TO_MOUNT=[str(cluster_code)],
        SLURM_SIGNAL_SECONDS=30, SLURM_CONFIGS=dict(cpu=dict(
            n_gpus=0, max_num_cores_per_node=os.cpu_count(), time_in_mins=720)))
    doctor = subprocess.run([sys.executable, "-m", "easylaunch.cli", "doctor", "--config",
                             str(config)], capture_output=True, text=True)
    assert f"runs import the cluster's copy {cluster_code} (SSS_CODE_DIRS_TO_MOUNT) instead " \
           f"of a snapshot of {laptop}, the same folder name" in doctor.stdout
    job = run_experiment(jobfns.which_code, mode="sss", config=str(config),
                         slurm_config_name="cpu", time_in_mins=5)
    assert job.launch_info["code_snapshots"] == []  # nothing of the laptop's copy is sent
    cluster = copy_to_cluster(job)
    assert not (Path(cluster) / ".snapshots").exists()
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True, capture_output=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert job.result(timeout=120)["where"] == "cluster copy"


@pytest.mark.parametrize("mode", ["here_no_doodad", "local"])
def test_the_from_doodad_example_runs_unchanged(mode, tmp_path):
    example = TESTS_DIR.parent / "examples/from_doodad"
    env = dict(os.environ, EASYLAUNCH_CONFIG=str(example / "config_private.py"))
    proc = subprocess.run([sys.executable, "-W", "error::UserWarning", str(example / "launch.py"),
                           mode], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    runs = sorted((tmp_path / "home/easylaunch-logs/from-doodad/doodad-example").iterdir())
    assert len(runs) == 2
    assert all('"succeeded"' in (r / "status.json").read_text() for r in runs)


def test_the_docs_table_names_every_doodad_key():
    from easylaunch.settings.doodad_names import DOODAD_KEYS

    page = (TESTS_DIR.parent / "docs/coming-from/doodad.md").read_text()
    missing = [k for k in DOODAD_KEYS if f"`{k}`" not in page]
    assert not missing


def test_doodads_htp_example_runs_on_slurm_as_one_allocation(tmp_path, stand_in, slurm_cluster):
    config = doodad_config(
        tmp_path, "brc_config_private.py", SSS_SUBMIT=False,
        SSS_LOG_DIR=str(tmp_path / "cluster/logs"),
        SSS_IMAGE=str(stand_in), SSS_CPU_IMAGE=str(stand_in), SSS_GPU_IMAGE=str(stand_in),
        SSS_PYTHON=sys.executable, SLURM_PYTHON=sys.executable, SSS_PRE_CMDS=[],
        BRC_EXTRA_SINGULARITY_ARGS="", SSS_SCRIPT_PATH=str(tmp_path / "seed.sh"),
        SSS_CODE_DIRS_TO_MOUNT=[], SSS_NON_CODE_DIRS_TO_MOUNT=[],
        SSS_DIR_AND_MOUNT_POINT_MAPPINGS=[], SLURM_SIGNAL_SECONDS=30,
        SLURM_CONFIGS=dict(cpu=dict(n_gpus=0, max_num_cores_per_node=os.cpu_count(),
                                    time_in_mins=60)))  # (the partitions allow an hour)
    env = dict(os.environ, EASYLAUNCH_CONFIG=str(config))
    proc = subprocess.run([sys.executable, str(FIXTURES / "htp_mode.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    from easylaunch import Job

    jobs = [Job.from_run_dir(p.parent) for p in sorted((tmp_path / "logs/test").glob(
        "*/launch.json"))]
    assert len(jobs) == 5 and len({j.launch_info["backend"]["batch_dir"] for j in jobs}) == 1
    assert len((tmp_path / "seed.sh").read_text().splitlines()) == 1  # one allocation
    subprocess.run(["bash", f"{copy_to_cluster(jobs[0])}/submit.sh"], check=True)
    assert [j.wait(timeout=180) for j in jobs] == [JobState.SUCCEEDED] * 5
    seeds = sorted(j.stdout_path.read_text().strip() for j in jobs)
    assert seeds == [f"{{'seed': {i}}}" for i in range(5)]


def test_slurm_singularity_runs_in_the_image(slurm_cfg, stand_in):
    job = run_experiment(jobfns.echo, mode="slurm_singularity", variant={"a": 1},
                         config=dict(slurm_cfg, SINGULARITY_IMAGE=str(stand_in),
                                     SINGULARITY_PYTHON=sys.executable))
    out = job.result(timeout=120)
    assert out["variant"] == {"a": 1}
    assert out["config"]["extra_launch_info"]["singularity_image"] == str(stand_in)
    assert out["config"]["extra_launch_info"]["slurm-job-id"]
    assert "singularity exec" in Path(job.launch_info["backend"]["script"]).read_text()


@pytest.mark.parametrize("mode, gpu, expected", [
    ("ec2", False, "c4.large"), ("ec2", True, "g3.4xlarge"), ("gcp", False, "n1-standard-4")])
def test_extra_launch_info_names_the_instance_type_as_doodads_did(mode, gpu, expected, tmp_path):
    settings = load_settings({"INSTANCE_TYPE": "c4.large", "GPU_INSTANCE_TYPE": "g3.4xlarge"})
    request = LaunchRequest(method_call=None, variants=[{}], exp_name="d", use_gpu=gpu,
                            gpu_id=None, log_root=tmp_path, slurm_config_name=None,
                            script_name="")
    info = get_mode(mode)(settings, {}).extra_launch_info(request)
    assert info == {"instance_type": expected, "docker_image": "None"}


def test_sss_image_alone_serves_gpu_and_cpu_runs_and_doctor_says_so(tmp_path, stand_in,
                                                                     slurm_cluster):
    # railrl's configs set SSS_IMAGE, leaving the template's SSS_GPU/CPU_IMAGE at 'TODO'
    config = doodad_config(
        tmp_path, "brc_config_private.py", SSS_SUBMIT=False,
        SSS_LOG_DIR=str(tmp_path / "cluster/logs"), SSS_IMAGE=str(stand_in),
        SSS_GPU_IMAGE="TODO", SSS_CPU_IMAGE="TODO", SSS_PYTHON=sys.executable, SSS_PRE_CMDS=[],
        BRC_EXTRA_SINGULARITY_ARGS="", SSS_SCRIPT_PATH=str(tmp_path / "seed.sh"),
        SSS_CODE_DIRS_TO_MOUNT=[], SSS_NON_CODE_DIRS_TO_MOUNT=[],
        SSS_DIR_AND_MOUNT_POINT_MAPPINGS=[], SLURM_SIGNAL_SECONDS=30,
        SLURM_CONFIGS=dict(cpu=dict(partition="debug", max_num_cores_per_node=os.cpu_count()),
                           gpu=dict(partition="debug", n_gpus=1)))
    doctor = subprocess.run([sys.executable, "-m", "easylaunch.cli", "doctor", "--config",
                             str(config)], capture_output=True, text=True)
    assert (f"SSS_IMAGE {stand_in} is used for both GPU and CPU runs of sss and htp "
            "(SSS_GPU_IMAGE and SSS_CPU_IMAGE are unset)") in doctor.stdout, doctor.stdout
    assert "mode sss: settings complete" in doctor.stdout
    cpu = run_experiment(jobfns.echo, mode="sss", variant={"a": 1}, config=str(config))
    subprocess.run(["bash", f"{copy_to_cluster(cpu)}/submit.sh"], check=True)
    assert cpu.result(timeout=120)["config"]["extra_launch_info"]["singularity_image"] == \
        str(stand_in)
    gpu = run_experiment(jobfns.echo, mode="sss", use_gpu=True, config=str(config))
    script = Path(gpu.launch_info["backend"]["batch_dir"], f"{gpu.id}.sbatch").read_text()
    assert f"--nv {stand_in}" in script or f"--nv {shlex.quote(str(stand_in))}" in script

"""Slurm scripts and commands as exact text (no cluster needed)."""

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import jobfns
import pytest

from easylaunch import EasyLaunchError, LaunchError, run_sweep
from easylaunch.modes.containers import SingularityImage
from easylaunch.modes.jobscript import (
    StartLine,
    job_script,
    settled_outside,
    start_line,
    task_line,
)
from easylaunch.modes.scheduled.htp import ansi_c_quote
from easylaunch.modes.schedulers import slurm, slurm_queue
from easylaunch.modes.schedulers.nodes import Nodes
from easylaunch.settings.entries import LAUNCH_SOURCE
from easylaunch_job.schedulers import sbatch_job_id

IN_LAUNCH = f"in {LAUNCH_SOURCE}: must be"  # (how a launch's bad entry value is told)

CONFIGS = dict(
    cpu=dict(account_name="co_rail", partition="savio", n_gpus=0, max_num_cores_per_node=20,
             time_in_mins=4305, extra_flags="--qos savio_normal"),
    gpu=dict(account_name="co_rail", partition="savio3_2080ti", n_gpus=1,
             max_num_cores_per_node=8, n_cpus_per_task=2, time_in_mins=100,
             extra_flags="--qos rail_2080ti3_normal --mail-type=FAIL"),
    tiny=dict(n_gpus=1, partition="gpu", n_cpus_per_task=1, time_in_mins=5),
)


@pytest.mark.parametrize("name, use_gpu, problem", [
    ("nope", False, "slurm_config_name='nope' is not in SLURM_CONFIGS; known: cpu, gpu, tiny"),
    ("tiny", True, "a GPU job with n_cpus_per_task=1 is refused"),
    ("cpu", True, "use_gpu=True but SLURM_CONFIGS\\['cpu'\\] asks for n_gpus=0"),
])
def test_bad_resource_choices(name, use_gpu, problem):
    with pytest.raises(LaunchError, match=problem):
        slurm.resolve_resources(CONFIGS, name, use_gpu)


# (the message a settings file's bad value gets, with the launch's options as its source)
@pytest.mark.parametrize("cfg, problem", [
    (dict(time_in_mins=0), '["time_in_mins"] = 0 IN_LAUNCH a positive number of minutes'),
    (dict(time_in_mins=-3), '["time_in_mins"] = -3 IN_LAUNCH a positive number of minutes'),
    (dict(time_in_mins=5, n_gpus=1, n_cpus_per_task=2), "names no partition"),
    (dict(time_in_mins=5, gpus=1), "unknown field 'gpus'; did you mean 'n_gpus'?"),
    (dict(time_in_mins="5h"), """["time_in_mins"] = '5h' IN_LAUNCH a positive number"""),
    (dict(time_in_mins=5, mem="lots"), """["mem"] = 'lots' IN_LAUNCH an amount sbatch reads"""),
    (dict(time_in_mins=5, gpu_string="TITAN; rm -rf"), "IN_LAUNCH a GPU type as doodad's"),
    (dict(time_in_mins=5, partition="TODO"), "'TODO' in the settings with this launch's options: "
                                             "doodad's placeholder: set it"),
])
def test_bad_resource_values(cfg, problem):
    problem = problem.replace("IN_LAUNCH", IN_LAUNCH)
    with pytest.raises(LaunchError, match=re.escape(problem)) as caught:
        slurm.resolve_resources({"x": cfg}, "x", False)
    assert str(caught.value).startswith("SLURM_CONFIGS[")  # (the entry named first)


def test_nodes_follow_the_cores_asked_for():
    res = slurm.resolve_resources(
        {"c": dict(time_in_mins=5, n_cpus_per_task=4, max_num_cores_per_node=8)}, "c", False,
        n_tasks=5)
    assert res.nodes == 3  # ceil(5 * 4 / 8)


def test_tasks_go_on_one_node_until_the_cluster_says_what_a_node_has():
    cfg = {"g": dict(time_in_mins=5, partition="gpu", n_gpus=2, n_cpus_per_task=2)}
    res = slurm.resolve_resources(cfg, "g", True, n_tasks=2)
    assert (res.nodes, res.tasks) == (1, 2)  # (no max_num_cores_per_node: one node)
    gpu = [Nodes("gpu", 8, 32, 256000, {"": 4})]
    assert slurm.fit(res, gpu, packs=False).nodes == 1
    small = [Nodes("gpu", 8, 2, 8000, {"": 4})]  # a node has CPUs for one task
    assert slurm.fit(res, small, packs=False).nodes == 2
    given = slurm.resolve_resources({"g": {**cfg["g"], "n_nodes": 1}}, "g", True, n_tasks=2)
    with pytest.raises(LaunchError, match="asks 4 CPUs on a node"):
        slurm.fit(given, small, packs=False)  # (n_nodes as written: refused, not changed)


def test_a_two_gpu_run_asks_one_node(tmp_path):
    configs = {"gpu": dict(partition="gpu", n_gpus=2, n_cpus_per_task=2, time_in_mins=5,
                           max_num_cores_per_node=None, n_nodes=None)}
    cfg = batch_settings(tmp_path, SLURM_CONFIGS=configs)
    (job,) = run_sweep(jobfns.train, [{}], mode="sss", use_gpu=True, config=cfg)
    script = (Path(job.launch_info["backend"]["batch_dir"]) / f"{job.id}.sbatch").read_text()
    assert "#SBATCH --nodes=1\n#SBATCH --ntasks=2\n" in script
    assert "#SBATCH --gres=gpu:2\n" in script


def test_sbatch_header_golden():
    res = slurm.resolve_resources(CONFIGS, None, use_gpu=True)
    assert slurm.sbatch_header(res, "my exp", "/logs/out dir/slurm-%A_%a.out", 120,
                               array="0-9%2") == [
        "#SBATCH --job-name=\"my exp\"",
        "#SBATCH --output=\"/logs/out dir/slurm-%A_%a.out\"",
        "#SBATCH --time=100",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --signal=B:USR1@120",
        "#SBATCH --account=\"co_rail\"",
        "#SBATCH --partition=\"savio3_2080ti\"",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --array=0-9%2",
        "#SBATCH --qos rail_2080ti3_normal --mail-type=FAIL",
    ]


def test_sbatch_values_survive_sbatchs_own_parser():
    res = slurm.resolve_resources(CONFIGS, "cpu", False)
    header = slurm.sbatch_header(res, "x", '/scratch/it\'s run#2 a\\b "q"', 0)
    assert header[1] == '#SBATCH --output="/scratch/it\'s run#2 a\\\\b \\"q\\""'
    assert not any("--signal" in line for line in header)  # 0: no time-limit warning
    with pytest.raises(LaunchError, match="holds a newline"):
        slurm.sbatch_header(res, "x", "/a\nb", 0)


def test_container_start_line_golden():
    line = start_line(StartLine(
        python="python3", pre_cmds=("export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/mujoco",),
        pythonpath=("/code/railrl",),
        container=SingularityImage("/images/rl.sif",
                                   (("/b", "/b"), ("/data/mujoco", "/root/.mujoco")),
                                   True, "--writable -B /usr/lib64")))
    assert line == (
        "exec singularity exec --writable -B /usr/lib64 -B /b:/b -B /data/mujoco:/root/.mujoco "
        "--nv /images/rl.sif /bin/bash -c 'export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/mujoco && "
        "export PYTHONPATH=/code/railrl${PYTHONPATH:+:$PYTHONPATH} && exec python3 "
        "\"$BUNDLE\"/job.pyz run \"$BUNDLE\" --log-dir \"$LOG_DIR\"'")


def test_restarts_from_a_container_are_settled_outside_it_golden():
    text = settled_outside("exec singularity exec /i.sif true", "/usr/bin/python3",
                           "/batch/it's.sbatch")
    assert text == (
        "trap 'kill -s TERM \"$child\" 2>/dev/null' TERM\n"
        "trap 'kill -s INT \"$child\" 2>/dev/null' INT\n"
        "trap 'kill -s HUP \"$child\" 2>/dev/null' HUP\n"
        "trap 'kill -s USR1 \"$child\" 2>/dev/null' USR1\n"
        "trap 'kill -s USR2 \"$child\" 2>/dev/null' USR2\n"
        "singularity exec /i.sif true &\n"
        "child=$!\n"
        'while wait "$child"; code=$?; kill -0 "$child" 2>/dev/null; do :; done\n'
        "EASYLAUNCH_RESUBMIT_SCRIPT='/batch/it'\"'\"'s.sbatch' exec /usr/bin/python3 "
        '"$BUNDLE"/job.pyz run "$BUNDLE" --log-dir "$LOG_DIR" --after-exit "$code"')


def test_job_script_golden_with_hostile_paths():
    text = job_script(["#SBATCH --time=5"],
                      [("/b/it's a $(bundle)", "/l/x\"y"), ("/b/2", "/l/`2`")], "exec true",
                      index=slurm.SIDE.index, exports=slurm.EXPORTS)
    assert text == """#!/bin/bash
#SBATCH --time=5
# Generated by easylaunch: 2 run(s); the array index picks the entry.
set -o pipefail
BUNDLES=(
    '/b/it'"'"'s a $(bundle)'
    /b/2
)
LOG_DIRS=(
    '/l/x"y'
    '/l/`2`'
)
i=${SLURM_ARRAY_TASK_ID:-0}
export BUNDLE="${BUNDLES[$i]}" LOG_DIR="${LOG_DIRS[$i]}"
export PYTHONUNBUFFERED=1 EASYLAUNCH_TIMEOUT_SIGNAL=USR1
[ -d "$LOG_DIR" ] || mkdir -p "$LOG_DIR"
exec >>"$LOG_DIR"/stdout.log 2>>"$LOG_DIR"/stderr.log
exec true
"""


def test_job_exports_golden_say_when_the_time_limit_comes():
    res = slurm.resolve_resources({"x": dict(time_in_mins=5)}, "x", False)
    limit = "EASYLAUNCH_TIME_LIMIT_AT=$(( $(date +%s) + 300 ))"
    assert slurm.job_exports(res, None) == f"EASYLAUNCH_TIMEOUT_SIGNAL=USR1 {limit}"
    assert slurm.job_exports(res, "/b/it's.sbatch") == (
        f"EASYLAUNCH_TIMEOUT_SIGNAL=USR1 {limit} "
        "EASYLAUNCH_RESUBMIT_SCRIPT='/b/it'\"'\"'s.sbatch' EASYLAUNCH_SCHEDULER=slurm")


def test_hostile_paths_reach_the_shell_as_data(tmp_path):
    weird = tmp_path / "it's a $(touch pwned) dir"
    script = job_script([], [(str(weird / "b"), str(weird / "l"))],
                        'printf %s "$BUNDLE" > "$LOG_DIR"/../seen', slurm.SIDE.index, slurm.EXPORTS)
    (tmp_path / "s.sh").write_text(script)
    subprocess.run(["bash", str(tmp_path / "s.sh")], cwd=tmp_path, check=True)
    assert (weird / "seen").read_text() == str(weird / "b")
    assert not (tmp_path / "pwned").exists()


def test_task_line_golden():
    assert task_line("/b 1", "/l", "exec x") == (
        "export BUNDLE='/b 1' LOG_DIR=/l; export PYTHONUNBUFFERED=1 "
        "EASYLAUNCH_TIMEOUT_SIGNAL=USR1; [ -d \"$LOG_DIR\" ] || mkdir -p \"$LOG_DIR\"; "
        "exec >>\"$LOG_DIR\"/stdout.log "
        "2>>\"$LOG_DIR\"/stderr.log; exec x")
    with pytest.raises(LaunchError, match="cannot hold a newline"):
        task_line("/b", "/l", "a\nb")


def test_parsing_slurm_output():
    assert slurm.parse_submit("1234\n") == "1234"
    assert slurm.parse_submit("1234;cluster\n") == "1234"
    with pytest.raises(LaunchError, match="did not print a job id"):
        slurm.parse_submit("sbatch: error: something\n")
    assert sbatch_job_id("Submitted batch job 77\n") == "77"  # the seed's ht_helper command
    assert sbatch_job_id("sbatch: error: Batch job submission failed\n") == ""
    assert slurm_queue.parse_squeue("12_0 RUNNING\n12_1 PENDING\n13 CANCELLED+\n9 COMPLETED\n") == {
        "12_0": "running", "12_1": "queued", "13": "cancelled", "9": "succeeded"}
    assert slurm_queue.parse_sacct("12_0|TIMEOUT\n12_1|CANCELLED by 0\n14|OUT_OF_MEMORY\n") == {
        "12_0": "timeout", "12_1": "cancelled", "14": "failed"}
    # (elements cancelled before they ran are one record of the whole array, which sacct finds
    # only by the array's own id: seen on the realistic cluster)
    assert slurm_queue.sacct_command(["92_1", "92_2", "95"])[-1] == "92,95"
    assert slurm_queue.parse_exits("92_0|FAILED|0:9\n92_[1-2]|FAILED|4:0\n93|COMPLETED|0:0\n"
                                   "94|CANCELLED by 0|0:0\n") == {
        "92_0": "killed by signal 9", "92_1": "exit code 4", "92_2": "exit code 4"}
    assert slurm_queue.parse_sacct("92_0|COMPLETED\n92_[1-2]|CANCELLED by 0\n") == {
        "92_0": "succeeded", "92_1": "cancelled", "92_2": "cancelled"}


def test_a_whole_job_array_named_by_its_own_id_has_its_elements_state():
    import subprocess

    def states(squeue: str, sacct: str) -> str | None:
        done = [subprocess.CompletedProcess([], 0, out, "") for out in (squeue, sacct)]
        return slurm_queue.states_from(["12"], *done)["12"]

    assert states("12_0 COMPLETED\n12_1 RUNNING\n", "") == "running"
    assert states("12_0 PENDING\n", "12_1|COMPLETED\n") == "queued"
    assert states("", "12_0|COMPLETED\n12_1|CANCELLED by 0\n") == "cancelled"
    assert states("", "12_0|COMPLETED\n12_1|COMPLETED\n") == "succeeded"
    assert states("", "125|COMPLETED\n") is None  # (another job, not an element)


def test_arrays_are_split_below_max_array_size():
    from easylaunch.modes.scheduled.job_arrays import array_chunks
    assert array_chunks(2500, 1000) == [range(0, 1000), range(1000, 2000), range(2000, 2500)]
    assert slurm.array_spec(1000, None) == "0-999"
    assert slurm.array_spec(5, 2) == "0-4%2"


def batch_settings(tmp_path, **changes):
    """Settings of a cluster that is not this machine (scripts are written, not run)."""
    return {"SSS_SUBMIT": False, "SSS_CLUSTER_HOST": "me@brc.berkeley.edu",
            "LOCAL_LOG_DIR": str(tmp_path / "logs"), "CODE_DIRS_TO_MOUNT": [str(jobfns_dir())],
            "SLURM_CONFIGS": CONFIGS, "SLURM_DIRECTORY_FOR_JOB_SCRIPT": "/global/scratch/me/launch",
            "SSS_LOG_DIR": "/global/scratch/me/logs", "SSS_CPU_IMAGE": "/img/cpu.sif",
            "SSS_GPU_IMAGE": "/img/gpu.sif", "SSS_SCRIPT_PATH": str(tmp_path / "seed.sh"),
            **changes}


def jobfns_dir() -> Path:
    return Path(jobfns.__file__).parent


def test_htp_ht_helper_command_is_the_seed_form(tmp_path):
    cfg = batch_settings(tmp_path, HTP_RUNNER="ht_helper",
                         TASKFILE_PATH_ON_BRC="/global/scratch/vitchyr/logs/taskfile_from_doodad.sh")
    jobs = run_sweep(jobfns.train, [{}] * 5, mode="htp", config=cfg)
    batch = Path(jobs[0].launch_info["backend"]["batch_dir"])
    expected = ("sbatch -A co_rail -p savio -t 4305 -N 1 -n 5 --cpus-per-task=1 --qos "
                "savio_normal --wrap=$'module load gcc openmpi;ht_helper.sh -m \"python/3.5\" -t "
                "/global/scratch/vitchyr/logs/taskfile_from_doodad.sh'")
    submit = (batch / "submit.sh").read_text()
    run_ids = ",".join(j.id for j in jobs)
    assert submit.endswith(f"\nsubmit {run_ids} {expected}\n")  # job.pyz submit reads its id
    assert "job_ids.txt" in submit
    assert (tmp_path / "seed.sh").read_text() == expected + "\n"
    assert len((batch / "tasks.txt").read_text().splitlines()) == 5
    assert ansi_c_quote("it's") == "$'it\\'s'"


def test_htp_of_several_nodes_is_refused_where_it_cannot_run(tmp_path):
    with pytest.raises(LaunchError, match="ht_helper.sh packs one node"):
        run_sweep(jobfns.train, [{}] * 4, mode="htp", n_nodes=2,
                  config=batch_settings(tmp_path, HTP_RUNNER="ht_helper",
                                        TASKFILE_PATH_ON_BRC="/x/tasks.sh"))
    assert not (tmp_path / "logs" / "default").exists()


def test_sss_binds_every_code_and_data_folder_at_its_mount_point(tmp_path):
    cfg = batch_settings(
        tmp_path,
        CODE_DIRS_TO_MOUNT=[dict(local_dir=str(jobfns_dir()), mount_point="/code/tests")],
        SSS_CODE_DIRS_TO_MOUNT=["/global/home/me/git/multiworld"],
        SSS_NON_CODE_DIRS_TO_MOUNT=[dict(local_dir="/global/home/me/.mujoco",
                                         mount_point="/root/.mujoco")],
        SSS_PRE_CMDS=["module load cuda"], SLURM_CONFIGS=dict(CONFIGS, gpu=dict(
            CONFIGS["gpu"], extra_flags="")))
    (job,) = run_sweep(jobfns.train, [{}], mode="sss", use_gpu=True, config=cfg)
    backend = job.launch_info["backend"]
    batch, cluster = Path(backend["batch_dir"]), backend["cluster_batch_dir"]
    script = (batch / f"{job.id}.sbatch").read_text()
    digest = job.launch_info["code_snapshots"][0]["digest"]
    assert (f"exec singularity exec -B {cluster}:{cluster} "
            "-B /global/scratch/me/logs:/global/scratch/me/logs "
            f"-B {cluster}/.snapshots/{digest}:/code/tests "
            "-B /global/home/me/git/multiworld:/code/multiworld "
            "-B /global/home/me/.mujoco:/root/.mujoco --nv /img/gpu.sif /bin/bash -c "
            "'module load cuda && export PYTHONPATH=/code/tests:/code/multiworld"
            "${PYTHONPATH:+:$PYTHONPATH} && exec python3 \"$BUNDLE\"/job.pyz run \"$BUNDLE\" "
            "--log-dir \"$LOG_DIR\"'") in script
    assert "#SBATCH --gres=gpu:1" in script and "#SBATCH --partition=\"savio3_2080ti\"" in script
    assert f"    {cluster}/default/{job.log_dir.name}/bundle\n" in script
    assert f"    /global/scratch/me/logs/default/{job.log_dir.name}\n" in script
    assert (batch / ".snapshots" / digest / "jobfns.py").exists()
    assert (batch / "default" / job.log_dir.name / "bundle/function.pkl").exists()
    assert backend["job_log_dir"] == f"/global/scratch/me/logs/default/{job.log_dir.name}"


def test_sss_seed_script_appends_within_a_process_and_starts_fresh_in_a_new_one(tmp_path):
    cfg = batch_settings(tmp_path)
    run_sweep(jobfns.train, [{}, {}], mode="sss", config=cfg)
    run_sweep(jobfns.train, [{}], mode="sss", config=cfg)
    assert len((tmp_path / "seed.sh").read_text().splitlines()) == 3
    code = (f"import sys; sys.path.insert(0, {str(jobfns_dir())!r}); import jobfns; "
            f"from easylaunch import run_sweep; "
            f"run_sweep(jobfns.train, [{{}}], mode='sss', config={cfg!r})")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    lines = (tmp_path / "seed.sh").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sbatch /global/scratch/me/launch/")


def test_sss_prints_the_copy_and_submit_commands(tmp_path, capsys):
    cfg = batch_settings(tmp_path, SSS_CLUSTER_HOST="me@brc.berkeley.edu")
    (job,) = run_sweep(jobfns.train, [{}], mode="sss", config=cfg)
    backend = job.launch_info["backend"]
    err = capsys.readouterr().err
    assert (f"rsync -a {backend['batch_dir']}/ me@brc.berkeley.edu:"
            f"{backend['cluster_batch_dir']}/") in err
    assert f"bash {backend['cluster_batch_dir']}/submit.sh" in err


def test_sss_submit_script_golden_and_its_job_ids(tmp_path):
    """submit.sh submits each script through the job side the batch carries, which records
    each run's job id; a refused sbatch stops it with sbatch's words, the ids so far kept."""
    jobs = run_sweep(jobfns.train, [{}, {}], mode="sss", config=batch_settings(tmp_path))
    batch = Path(jobs[0].launch_info["backend"]["batch_dir"])
    job_side = next(p.name for p in (batch / ".blobs").iterdir() if p.name.endswith("job.pyz"))
    a, b = (j.id for j in jobs)
    assert (batch / "submit.sh").read_text() == (
        "#!/bin/bash\n# Generated by easylaunch. Run on the cluster: bash submit.sh\n"
        "set -euo pipefail\ncd \"$(dirname \"$0\")\"\n"
        f'submit() {{ python3 .blobs/{job_side} submit slurm job_ids.txt "$@"; }}\n'
        f"submit {a} sbatch --parsable {a}.sbatch\nsubmit {b} sbatch --parsable {b}.sbatch\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text(  # the second submission is refused
        "#!/bin/bash\nif [ -e \"$0.once\" ]; then echo 'sbatch: error: QOSMaxSubmitJobs' >&2;"
        " exit 1; fi\ntouch \"$0.once\"; echo '4242;brc'\n")
    (fake / "sbatch").chmod(0o755)
    out = subprocess.run(["bash", str(batch / "submit.sh")], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    assert out.returncode == 1 and "QOSMaxSubmitJobs" in out.stderr
    assert f"submitted {a} as Slurm job 4242" in out.stdout
    assert (batch / "job_ids.txt").read_text() == f"{a} 4242\n"


@pytest.mark.parametrize("mode, change, problem", [
    ("sss", dict(SSS_CPU_IMAGE=None), "SSS_CPU_IMAGE is not set"),
    ("sss", dict(SSS_LOG_DIR=None), "needs SSS_LOG_DIR"),
    ("htp", dict(SLURM_DIRECTORY_FOR_JOB_SCRIPT="relative/path"),
     "SLURM_DIRECTORY_FOR_JOB_SCRIPT must be an absolute path"),
    ("htp", dict(HTP_RUNNER="ht_helper"), "TASKFILE_PATH_ON_BRC"),
    ("sss", dict(SSS_NON_CODE_DIRS_TO_MOUNT=[dict(local_dir="rel", mount_point="/x")]),
     "must be an absolute path on the cluster"),
])
def test_batch_modes_refuse_incomplete_settings(tmp_path, mode, change, problem):
    cfg = dict(batch_settings(tmp_path), **change)
    with pytest.raises(EasyLaunchError, match=problem):
        run_sweep(jobfns.train, [{}], mode=mode, config=cfg)
    assert not os.path.exists(tmp_path / "logs" / "default")


def test_htp_packs_gpu_runs_a_granted_gpu_each_with_its_own_packer_only(tmp_path):
    cfg = batch_settings(tmp_path, SSS_GPU_IMAGE=None, SSS_CPU_IMAGE=None)
    jobs = run_sweep(jobfns.train, [{}] * 3, mode="htp", use_gpu=True, config=cfg)
    script = (Path(jobs[0].launch_info["backend"]["batch_dir"]) / "htp.sbatch").read_text()
    assert "#SBATCH --gres=gpu:3\n" in script  # (a GPU a worker, each run on one)
    assert " --workers 3 " in script and script.rstrip().endswith(" --warm --gpus granted")
    with pytest.raises(LaunchError, match="packs GPU runs on Slurm with easylaunch's packer"):
        run_sweep(jobfns.train, [{}], mode="htp", use_gpu=True,
                  config=dict(cfg, HTP_RUNNER="ht_helper", TASKFILE_PATH_ON_BRC="/x"))
    cfg["SLURM_CONFIGS"] = dict(CONFIGS, gpu=dict(CONFIGS["gpu"], n_gpus=2))
    with pytest.raises(LaunchError, match="one GPU of the allocation; SLURM_CONFIGS\\['gpu'\\] "
                                          "asks n_gpus=2 a run: set n_gpus=1"):
        run_sweep(jobfns.train, [{}], mode="htp", use_gpu=True, config=cfg)


def test_slurm_mode_off_a_login_node_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LaunchError, match="sbatch, which is not on PATH.*mode='sss'"):
        run_sweep(jobfns.train, [{}], mode="slurm", config=batch_settings(tmp_path))


def test_environment_broadcast_lines_golden():
    from easylaunch.modes.jobscript import broadcast_env
    from easylaunch.modes.schedulers import pbs

    assert broadcast_env("/logs/.envs/env-ab12.tar.gz", "/local/scratch",
                         slurm.broadcast).splitlines() == [
        "sbcast --force /logs/.envs/env-ab12.tar.gz /local/scratch/easylaunch-env-ab12.tar.gz "
        "|| { echo \"easylaunch: sbcast of the packed environment failed on $(hostname); the "
        "run did not start\" >&2; exit 1; }",
        "srun --ntasks-per-node=1 -N \"$SLURM_JOB_NUM_NODES\" -n \"$SLURM_JOB_NUM_NODES\" bash "
        "-c 'rm -rf /local/scratch/easylaunch-env-ab12 && mkdir -p "
        "/local/scratch/easylaunch-env-ab12 && tar -xzf "
        "/local/scratch/easylaunch-env-ab12.tar.gz -C /local/scratch/easylaunch-env-ab12' || "
        "{ echo \"easylaunch: unpacking the environment failed on $(hostname); the run did not "
        "start\" >&2; exit 1; }",
        "export EASYLAUNCH_ENV=/local/scratch/easylaunch-env-ab12",
    ]
    lines = broadcast_env("/logs/env-ab12.tar.gz", "/tmp", pbs.broadcast).splitlines()
    assert lines[0].startswith("mpiexec --np \"$(sort -u \"$PBS_NODEFILE\" | wc -l)\" --ppn 1 "
                             "bash -c 'cp /logs/env-ab12.tar.gz /tmp/easylaunch-env-ab12.tar.gz"
                             " && rm -rf /tmp/easylaunch-env-ab12")
    assert lines[-1] == "export EASYLAUNCH_ENV=/tmp/easylaunch-env-ab12"


def test_multi_rank_runs_start_through_srun(tmp_path):
    cfg = batch_settings(tmp_path)
    (job,) = run_sweep(jobfns.train, [{}], mode="sss", use_gpu=True, n_nodes=2, config=cfg)
    script = (Path(job.launch_info["backend"]["batch_dir"]) / f"{job.id}.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks=2" in script
    assert ("exec srun -u -N 2 -n 2 --gpus-per-node=1 --kill-on-bad-exit=1 "
            "--output=\"${LOG_DIR//%/%%}\"/stdout.rank%t.log "
            "--error=\"${LOG_DIR//%/%%}\"/stderr.rank%t.log "
            "bash -c 'exec singularity exec") in script


def test_one_launch_replaces_the_configs_resources(tmp_path):
    cfg = batch_settings(tmp_path)
    before = copy.deepcopy(cfg["SLURM_CONFIGS"])
    (job,) = run_sweep(jobfns.train, [{}], mode="sss", config=cfg, partition="big mem",
                       time_in_mins="2:00:00", mem="64g", account="lab", qos="high",
                       constraint="a100|h100", n_cpus_per_task=8)
    script = (Path(job.launch_info["backend"]["batch_dir"]) / f"{job.id}.sbatch").read_text()
    for line in ('--partition="big mem"', "--time=120", "--mem=64G", '--account="lab"',
                 '--qos="high"', '--constraint="a100|h100"', "--cpus-per-task=8"):
        assert f"#SBATCH {line}\n" in script
    assert cfg["SLURM_CONFIGS"] == before  # for this launch only


@pytest.mark.parametrize("option, problem", [
    (dict(mem="lots"), """["mem"] = 'lots' IN_LAUNCH an amount sbatch reads"""),
    (dict(account=["lab"]), """["account_name"] = ['lab'] IN_LAUNCH a string"""),
    (dict(qos=3), '["qos"] = 3 IN_LAUNCH a string'),
    (dict(n_cpus_per_task=0), '["n_cpus_per_task"] = 0 IN_LAUNCH a whole number, 1 or more'),
    (dict(time_in_mins="soon"), """["time_in_mins"] = 'soon' IN_LAUNCH a positive number"""),
])
def test_a_launchs_bad_resource_is_refused_before_anything_is_made(tmp_path, option, problem):
    cfg = batch_settings(tmp_path)
    with pytest.raises(LaunchError, match=re.escape(problem.replace("IN_LAUNCH", IN_LAUNCH))):
        run_sweep(jobfns.train, [{}], mode="sss", config=cfg, **option)
    assert not (tmp_path / "logs").exists()


def _fake_run(answers):
    def run(argv):
        code, out, err = answers[argv[0]]
        return subprocess.CompletedProcess(argv, code, out, err)
    return run


def test_slurm_that_cannot_be_asked_is_not_slurm_forgetting():
    ids = ["5_0", "5_1"]
    failing = _fake_run({"squeue": (1, "", "slurm_load_jobs error: Socket timed out"),
                         "sacct": (1, "", "accounting disabled")})
    assert slurm_queue.query_states(ids, failing) == {"5_0": "unknown", "5_1": "unknown"}
    forgotten = _fake_run({"squeue": (1, "", "slurm_load_jobs error: Invalid job id specified"),
                           "sacct": (1, "", "Slurm accounting storage is disabled")})
    assert slurm_queue.query_states(ids, forgotten) == {"5_0": None, "5_1": None}
    folded = _fake_run({"squeue": (0, "5_0 RUNNING\n", ""),
                        "sacct": (0, "5_[1-2]|PENDING\n", "")})
    assert slurm_queue.query_states(ids, folded) == {"5_0": "running", "5_1": "queued"}
    missing = _fake_run({"squeue": (127, "", "squeue: not found"), "sacct": (127, "", "")})
    assert slurm_queue.query_states(ids, missing)["5_0"] == "unknown"

"""What needs the test cluster's several nodes (scripts/slurm-up.sh, issue 49): runs across
nodes, fake GPUs as GRES, accounting through slurmdbd (finished jobs leave squeue after 10 s),
preemption, lost nodes, QOS limits and a second user."""

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jobfns
import pytest
from conftest import TESTS_DIR
from helpers import pool_record, wait_for

from easylaunch import JobState, run_experiment, run_sweep

# (scripts/test.sh runs a file's tests in one worker, in turn: one of these takes a node down,
# easyuser's QOS counts the jobs of two, and one needs node4's every CPU. The tests of other
# files run in the default partition, debug: node1 and node2. So what takes a node down or holds
# a whole node stays on node3 and node4.)


@pytest.fixture
def real_cfg(cfg, slurm_cluster):
    """Settings for jobs in the test cluster's partitions of four nodes (cpu) and of its GPU
    nodes (gpu)."""
    return dict(cfg, SLURM_PYTHON=sys.executable, SLURM_SIGNAL_SECONDS=30,
                SLURM_CONFIGS=dict(
                    cpu=dict(partition="cpu", max_num_cores_per_node=4, time_in_mins=10),
                    gpu=dict(partition="gpu", n_gpus=1, n_cpus_per_task=2,
                             max_num_cores_per_node=4, time_in_mins=10)))


def _rank_facts(job, rank: int) -> dict:
    """What rank ``rank`` printed (rank 0 records the run's end: another rank's process may
    start on its node after that, seen once with nothing to wait for)."""
    log = job.log_dir / f"stdout.rank{rank}.log"

    def printed() -> list[str]:
        return [ln for ln in log.read_text().splitlines() if ln.startswith("{")] \
            if log.exists() else []

    assert wait_for(lambda: printed(), 30), f"rank {rank} printed nothing in {log}"
    (line,) = printed()
    return json.loads(line)


def test_a_two_node_run_has_a_rank_on_each_node(real_cfg):
    job = run_experiment(jobfns.node_facts, mode="slurm", n_nodes=2, config=real_cfg)
    result = job.result(timeout=120)
    ranks = [_rank_facts(job, rank) for rank in (0, 1)]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    hosts = [r["host"] for r in ranks]
    assert len(set(hosts)) == 2 and all(h.startswith("node") for h in hosts), hosts
    assert result["host"] == hosts[0] and result["rank"] == 0
    assert job.status() is JobState.SUCCEEDED


def test_gpu_runs_see_the_gpus_slurm_gave_them(real_cfg):
    """Three runs at once on two nodes of two GPUs: one node holds two, each its own GPU."""
    jobs = run_sweep(jobfns.node_facts, [dict(hold=3, n=i) for i in range(3)], mode="slurm",
                     use_gpu=True, config=real_cfg)
    seen = [job.result(timeout=120) for job in jobs]
    for facts in seen:
        assert facts["host"] in ("node3", "node4"), facts  # (the gpu partition's nodes)
        assert facts["slurm_job_gpus"] in ("0", "1"), facts
        assert facts["cuda_visible_devices"] == facts["slurm_job_gpus"], facts  # as Slurm set it
        # doodad_config.gpu_id: the device's index among the visible ones
        assert facts["cuda_visible_devices"].split(",")[facts["gpu_id"]] == \
            facts["slurm_job_gpus"], facts
    by_node = {}
    for facts in seen:
        by_node.setdefault(facts["host"], []).append(facts["slurm_job_gpus"])
    assert sorted(len(set(gpus)) for gpus in by_node.values())[-1] == 2, by_node


# How a run is ended from outside: scancel (the run's runner gets SIGTERM and records the
# end itself), or SIGKILL to the batch shell and its children (nothing is recorded: only Slurm,
# through sacct once squeue has forgotten the job, knows how it ended).
ENDS = {"scancel": (["scancel"], "cancelled"),
        "killed": (["scancel", "--batch", "--signal=KILL"], "failed")}


@pytest.mark.parametrize("how", ENDS)
def test_a_run_ended_from_outside_shows_its_end_after_squeue_forgot_it(real_cfg, tmp_path, how):
    job = run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, mode="slurm",
                         config=real_cfg)
    slurm_id = job.launch_info["backend"]["slurm_job_id"]
    command, end = ENDS[how]
    try:
        assert wait_for(lambda: job.recorded_state() is JobState.RUNNING, 60)
        subprocess.run([*command, slurm_id], check=True)

        def in_squeue() -> bool:
            return bool(subprocess.run(["squeue", "-h", "--states=all", "-j", slurm_id,
                                        "-o", "%T"], capture_output=True, text=True
                                       ).stdout.strip())

        # MinJobAge=10 s; slurmctld purges old jobs on its own clock (seen: 12-19 s).
        # Nothing asks easylaunch before: the end comes from the run's record or from sacct.
        assert wait_for(lambda: not in_squeue(), 90), "the job stayed in squeue"
        if how == "killed":
            assert job.recorded_state() is JobState.RUNNING  # (nobody recorded the end)
        assert job.status() is JobState(end)
        assert job.info()["state"] == end
        if how == "killed":
            assert f"Slurm reports job {slurm_id} as failed (killed by signal 9)" in \
                job.info()["error"]
        settings = tmp_path / "settings.py"
        settings.write_text(f"LOCAL_LOG_DIR = {real_cfg['LOCAL_LOG_DIR']!r}\n")
        shown = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config",
                                str(settings), "ls", "--json"],
                               capture_output=True, text=True, check=True).stdout
        (run,) = [r for r in json.loads(shown)["runs"] if r["id"] == job.id]
        assert run["state"] == end, run
    finally:
        subprocess.run(["scancel", slurm_id])


def counting(folder, *commands: str) -> dict:
    """An environment whose PATH puts, before each of ``commands``, a script that logs its call
    in ``folder/calls`` and runs the real one."""
    import os
    import shutil

    folder.mkdir()
    for name in commands:
        (folder / name).write_text(f"#!/bin/sh\necho {name} >> {folder}/calls\n"
                                   f"exec {shutil.which(name)} \"$@\"\n")
        (folder / name).chmod(0o755)
    return dict(os.environ, PATH=f"{folder}:{os.environ['PATH']}")


def test_a_sweep_the_queue_forgot_is_settled_by_one_sacct_call(real_cfg, tmp_path, exp):
    """Twelve runs cancelled while they waited (held at submission): no run recorded an end, and
    once squeue has forgotten them, one ls asks sacct once for the whole sweep."""
    real_cfg["SLURM_CONFIGS"]["cpu"]["extra_flags"] = "--hold"
    jobs = run_sweep(jobfns.train, [{"i": i} for i in range(12)], exp_name=exp, mode="slurm",
                     config=real_cfg)
    array = jobs[0].launch_info["backend"]["slurm_job_id"].split("_")[0]
    subprocess.run(["scancel", array], check=True)

    def in_squeue() -> bool:
        return bool(subprocess.run(["squeue", "-h", "--states=all", "-j", array, "-o", "%T"],
                                   capture_output=True, text=True).stdout.strip())

    assert wait_for(lambda: not in_squeue(), 90), "the jobs stayed in squeue"
    settings = tmp_path / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {real_cfg['LOCAL_LOG_DIR']!r}\n")
    env = counting(tmp_path / "bin", "squeue", "sacct")
    shown = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", str(settings),
                            "ls", "--json", "--exp", exp], capture_output=True, text=True,
                           check=True, env=env).stdout
    assert (tmp_path / "bin" / "calls").read_text().split() == ["squeue", "sacct"]
    runs = json.loads(shown)["runs"]
    assert sorted(r["id"] for r in runs) == sorted(j.id for j in jobs)
    assert {r["state"] for r in runs} == {"cancelled"}
    for job in jobs:
        assert job.recorded_state() is JobState.CANCELLED
        assert f"Slurm reports job {job.launch_info['backend']['slurm_job_id']} as cancelled" \
            in job.info()["error"], job.info()
    from easylaunch import load_sweep

    table = load_sweep(jobs[0].launch_info["sweep_id"], config=str(settings))
    assert sorted(table["state"]) == ["cancelled"] * 12


def test_ls_says_a_run_waits_for_its_arrays_throttle(real_cfg, tmp_path, exp):
    """array_parallelism=1: the second run of the array waits with Slurm's reason."""
    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 5}] * 2, exp_name=exp, mode="slurm",
                     array_parallelism=1, config=real_cfg)
    settings = tmp_path / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {real_cfg['LOCAL_LOG_DIR']!r}\n")

    def listed() -> str:
        return subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config",
                               str(settings), "ls", "--exp", exp], capture_output=True,
                              text=True, check=True).stdout

    assert wait_for(lambda: re.search(rf"^{jobs[1].id}\t.*\tqueued: JobArrayTaskLimit\t",
                                      listed(), re.MULTILINE), 30), listed()
    assert [job.wait(timeout=120) for job in jobs] == [JobState.SUCCEEDED] * 2


@pytest.mark.parametrize("change, said", [
    ({"n_gpus": 3}, r"asks 3 GPUs on a node, but the nodes of partition 'gpu' have at most 2: "
                    r"lower n_gpus to 2 or less"),
    ({"time_in_mins": 120}, r"asks 120 minutes, but partition 'gpu' allows at most 60: lower "
                            r"time_in_mins to 60 or less")])
def test_what_the_gpu_partition_cannot_give_is_refused_at_launch(real_cfg, change, said):
    """sinfo's GRES and time limits, read at launch: nothing is submitted or made."""
    from pathlib import Path

    from easylaunch.errors import LaunchError

    real_cfg["SLURM_CONFIGS"]["gpu"].update(change)
    with pytest.raises(LaunchError, match=said):
        run_experiment(jobfns.train, mode="slurm", use_gpu=True, config=real_cfg)
    assert not list(Path(real_cfg["LOCAL_LOG_DIR"]).glob("*/*/status.json"))


def test_a_run_preempted_by_a_higher_priority_job_goes_on_from_its_checkpoint(real_cfg):
    """A run in the low-priority partition holds node4's four CPUs; a job of the cpu partition
    asks for them. Slurm sends the run SIGTERM (a stop notice: it saves), requeues it after its
    GraceTime, and starts it again once node4 is free: it resumes from the save."""
    from jobfns import steps_done

    real_cfg["SLURM_CONFIGS"]["cpu"].update(partition="preempt", n_cpus_per_task=4,
                                            extra_flags="--nodelist=node4")
    job = run_experiment(jobfns.count_steps, variant={"steps": 160, "every": 1000,
                                                      "step_seconds": 0.25},
                         mode="slurm", max_restarts=2, config=real_cfg)
    assert wait_for(lambda: len(steps_done(job.log_dir)) >= 3, 120)
    sent = time.monotonic()
    urgent = subprocess.run(["sbatch", "--parsable", "--partition=cpu", "--nodelist=node4",
                             "--cpus-per-task=4", "--output=/dev/null", "--wrap=sleep 2"],
                            capture_output=True, text=True, check=True).stdout.strip()
    try:
        assert wait_for(lambda: any(a == 2 for a, _ in steps_done(job.log_dir)), 150)
        print(f"preempted run going on again {time.monotonic() - sent:.1f} s after the "
              "urgent job's submission")
        result = job.result(timeout=180)
    finally:
        subprocess.run(["scancel", urgent])
    (restart,) = job.info()["restarts"]
    assert restart["reason"] == "preempted", restart
    stopped_at = max(s for a, s in steps_done(job.log_dir) if a == 1)
    assert result["resumed_from"] == stopped_at  # saved at the notice: nothing redone
    assert result["steps"] == 160 and result["attempt"] == 2
    assert job.status() is JobState.SUCCEEDED


# Each user's own Python: Debian's, with easylaunch (scripts/pythons-up.sh); root's pyenv build
# is in /root, which other users cannot enter.
USERS_PYTHON = TESTS_DIR.parent / ".tools" / "pythons" / "debian" / "bin" / "python"
LAUNCH_AS_A = """
import json, sys
import jobfns
from easylaunch import run_sweep
jobs = run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], exp_name=sys.argv[2], mode="slurm",
                 config=sys.argv[1])
print(json.dumps({"ids": [j.id for j in jobs], "sweep": jobs[0].launch_info["sweep_id"],
                  "results": [j.result(timeout=120) for j in jobs]}))
"""
# What user B can open for reading under the shared log folder.
READABLE_BY_B = """
import json, os, sys
readable = []
for top, dirs, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(top, name)
        try:
            with open(path, "rb"):
                readable.append(os.path.relpath(path, sys.argv[1]))
        except OSError:
            pass
print(json.dumps(readable))
"""
# What user B's dashboard (`easylaunch ui`, over B's registry) answers for A's run and sweep:
# each path's status and text.
DASHBOARD_OF_B = """
import asyncio, json, sys
import httpx
from easylaunch.dashboard.app import create_app
config, run, sweep = sys.argv[1:]
async def main():
    app = create_app(config, "t", 1, None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:1",
                                 cookies={"easylaunch-ui-1": "t"}) as client:
        paths = ["/", f"/api/states?ids={run}", f"/run/{run}", f"/sweep/{sweep}",
                 f"/api/runs/{run}/log", f"/api/curves?runs={run}"]
        return {path: [(answer := await client.get(path)).status_code, answer.text]
                for path in paths}
print(json.dumps(asyncio.run(main())))
"""


def as_user(user: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` (its own HOME) with the tests' code."""
    out = subprocess.run(["su", user, "-s", "/bin/sh", "-c",
                          f"cd /tmp && env PYTHONPATH={TESTS_DIR} {shlex.join(argv)}"],
                         capture_output=True, text=True, timeout=300)
    if check and out.returncode != 0:
        raise AssertionError(f"{argv} as {user} exited {out.returncode}:\n{out.stderr}")
    return out


@pytest.fixture
def users_folder(slurm_cluster):
    """A folder both test users can enter (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="el-users-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_two_users_on_one_cluster_and_one_shared_log_folder_see_only_their_own_runs(
        users_folder, exp):
    """User A (easyuser) launches a sweep on the cluster into a log folder both can write;
    user B (easyremote) lists, asks, follows, cancels and loads with the same folder."""
    shared = users_folder / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # (as a project's group folder: everyone writes, each their own)
    settings = users_folder / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {str(shared)!r}\nSLURM_PYTHON = {str(USERS_PYTHON)!r}\n"
                        f"CODE_DIRS_TO_MOUNT = [{str(TESTS_DIR)!r}]\n"
                        "SLURM_CONFIGS = {'cpu': {'partition': 'cpu', 'time_in_mins': 10}}\n")
    settings.chmod(0o644)
    a = json.loads(as_user("easyuser", str(USERS_PYTHON), "-c", LAUNCH_AS_A,
                           str(settings), exp).stdout.splitlines()[-1])
    assert a["results"] == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]
    cli = [str(USERS_PYTHON), "-m", "easylaunch.cli", "--config", str(settings)]
    assert as_user("easyuser", *cli, "ls", "--exp", exp).stdout.count("\tsucceeded") == 2

    listed = json.loads(as_user("easyremote", *cli, "ls", "--all", "--json").stdout)
    assert not {run["id"] for run in listed["runs"]} & set(a["ids"])  # (B's own runs only)
    assert "no runs match" in as_user("easyremote", *cli, "ls", "--exp", exp).stderr
    for command in (["status"], ["logs"], ["cancel"]):
        out = as_user("easyremote", *cli, *command, a["ids"][0], check=False)
        assert out.returncode != 0, out  # (B's registry has no such run: its own runs only)
        assert f"no run id starts or ends with {a['ids'][0]!r}" in out.stderr, out
        assert "Traceback" not in out.stderr
    loaded = as_user("easyremote", str(USERS_PYTHON), "-c",
                     "import sys; from easylaunch import load_sweep; "
                     "load_sweep(sys.argv[1], config=sys.argv[2])", a["sweep"], str(settings),
                     check=False)
    assert loaded.returncode != 0 and a["sweep"] in loaded.stderr, loaded.stderr
    shown = json.loads(as_user("easyremote", str(USERS_PYTHON), "-c", DASHBOARD_OF_B,
                               str(settings), a["ids"][0], a["sweep"]).stdout)
    for page in ("/", f"/api/states?ids={a['ids'][0]}"):  # (B's runs: A's are not among them)
        status, text = shown.pop(page)
        assert status == 200 and a["ids"][0] not in text, text
    for page, (status, text) in shown.items():  # (A's run and sweep: B's registry has neither)
        assert status in (400, 404) and re.search(r"no (run|sweep)", text), (page, text)
    readable = json.loads(as_user("easyremote", str(USERS_PYTHON), "-c", READABLE_BY_B,
                                  str(shared)).stdout)
    assert readable == [], readable


def test_htp_on_two_nodes_runs_on_both(real_cfg):
    """n_nodes=2: srun starts a packer on each node of the allocation; the runs' hosts are both
    nodes."""
    real_cfg.update(SSS_SCRIPT_PATH=None)
    real_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = 1  # a worker a node
    jobs = run_sweep(jobfns.node_facts, [{"hold": 1, "n": i} for i in range(6)], mode="htp",
                     n_nodes=2, config=real_cfg)
    hosts = [job.result(timeout=180)["host"] for job in jobs]
    assert len(set(hosts)) == 2 and all(h.startswith("node") for h in hosts), hosts
    assert {job.info()["host"] for job in jobs} == set(hosts)


LAUNCH_UNDER_QOS = """
import json, sys
import jobfns
from easylaunch import run_sweep
from easylaunch.errors import LaunchError
try:
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(int(sys.argv[3]))],
                     exp_name=sys.argv[2], mode="slurm", config=sys.argv[1])
except LaunchError as exc:
    print(json.dumps({"refused": str(exc)}))
else:
    print(json.dumps({"results": [j.result(timeout=120) for j in jobs]}))
"""


def test_a_sweep_over_its_qos_limit_is_refused_before_anything_is_made(users_folder, exp):
    """easyuser's QOS 'limited' allows 3 jobs at once (MaxSubmitJobsPerUser): a sweep of 5
    (one job a run) is refused with the numbers and the fixes; a sweep of 2 runs."""
    logs = users_folder / "logs"
    settings = users_folder / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {str(logs)!r}\nSLURM_PYTHON = {str(USERS_PYTHON)!r}\n"
                        f"CODE_DIRS_TO_MOUNT = [{str(TESTS_DIR)!r}]\nSLURM_CONFIGS = {{'cpu': "
                        "{'partition': 'cpu', 'time_in_mins': 10, 'qos': 'limited'}}\n")
    settings.chmod(0o644)
    logs.mkdir()
    logs.chmod(0o1777)

    def launch(runs: int) -> dict:
        out = as_user("easyuser", str(USERS_PYTHON), "-c", LAUNCH_UNDER_QOS, str(settings), exp,
                      str(runs))
        return json.loads(out.stdout.splitlines()[-1])

    refused = launch(5)["refused"]
    assert "asks QOS 'limited', which lets a user have at most 3 jobs queued or running " \
           "(MaxSubmitJobsPerUser); you have 0, and this launch would add 5" in refused
    assert "launch at most 3 runs now, pack the runs into one job with mode='htp'" in refused
    assert not (logs / exp).exists()  # nothing made
    assert launch(2)["results"] == [{"x": 0, "y": 0}, {"x": 1, "y": 2}]

    # the settings name no QOS, and the user's default QOS is the limited one
    settings.write_text(settings.read_text().replace(", 'qos': 'limited'", ""))
    def default_qos(name: str) -> None:
        subprocess.run(["sacctmgr", "-i", "modify", "user", "easyuser", "set",
                        f"DefaultQOS={name}"], check=True, capture_output=True)

    default_qos("limited")
    try:
        refused = launch(5)["refused"]
    finally:
        default_qos("normal")
    assert "runs in your default QOS 'limited', which lets a user have at most 3 jobs" in refused


def test_a_two_node_run_all_reduces_with_gloo_and_has_its_ranks_on_both(real_cfg):
    """easylaunch.dist across two nodes: rank 0's host is the rendezvous (gloo on the CPU)."""
    pytest.importorskip("torch")
    job = run_experiment(jobfns.allreduce, mode="slurm", n_nodes=2, tasks_per_node=1,
                         config=real_cfg)
    assert job.result(timeout=300) == {"sum": 3.0, "world_size": 2, "backend": "gloo",
                                       "ranks": (0, 0, 2)}
    script = Path(job.launch_info["backend"]["script"]).read_text()
    assert "#SBATCH --nodes=2" in script and "exec srun -u -N 2 -n 2" in script


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(proc.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def _lose_node(node: str, runner_pid: int) -> None:
    """What a node that dies does: its slurmd stops answering and the job steps on it die with
    it (found from the run's runner up to its slurmstepd); then Slurm is told it is DOWN."""
    os.kill(int(Path(f"/run/slurm-realistic/slurmd-{node}.pid").read_text()), signal.SIGKILL)
    step = runner_pid
    while not Path(f"/proc/{step}/cmdline").read_bytes().startswith(b"slurmstepd"):
        step = int(Path(f"/proc/{step}/stat").read_text().rsplit(")", 1)[1].split()[1])
    for pid in _process_tree(step):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN",
                    "Reason=easylaunch test: node lost"], check=True)


def test_a_run_on_a_node_that_dies_finishes_on_another_from_its_checkpoint(real_cfg):
    """The node a run is on dies: Slurm requeues the job (NODE_FAIL), and the run goes on
    elsewhere from its last save. (slurm-up.sh brings the node back afterwards.) It runs on
    node3 or node4: the other files' jobs on node1 and node2 go on."""
    from jobfns import steps_done

    real_cfg["SLURM_CONFIGS"]["cpu"]["extra_flags"] = "--exclude=node[1-2]"
    job = run_experiment(jobfns.count_steps, variant={"steps": 60, "every": 5,
                                                      "step_seconds": 0.25},
                         mode="slurm", max_restarts=2, config=real_cfg)
    assert wait_for(lambda: len(steps_done(job.log_dir)) >= 8, 120)
    node = job.info()["host"]
    try:
        _lose_node(node, job.info()["pid"])
        result = job.result(timeout=240)
        assert job.info()["host"] != node
    finally:
        subprocess.run([str(TESTS_DIR.parent / "scripts" / "slurm-up.sh")], check=True,
                       capture_output=True)
    assert result["steps"] == 60 and result["attempt"] == 2
    stopped_at = max(s for a, s in steps_done(job.log_dir) if a == 1)
    assert stopped_at - 5 < result["resumed_from"] <= stopped_at  # (a save every 5 steps)
    (restart,) = job.info()["restarts"]
    assert restart["reason"] == "lost" and restart["host"] == node, restart
    assert "ended without recording an outcome (node failure?)" in restart["error"]


def test_a_pool_whose_node_dies_goes_on_in_its_requeued_job_with_its_runs(real_cfg):
    """The node of a pool's allocation dies under two running runs, with a third waiting.
    Slurm requeues the pool's job (NODE_FAIL) on the other node; its packer takes up the
    runs left there: the two lost ones go on from their last saves, the third starts."""
    from jobfns import steps_done

    from easylaunch import list_pools, start_pool, stop_pool

    real_cfg["SLURM_CONFIGS"]["cpu"]["extra_flags"] = "--exclude=node[1-2]"
    pool = start_pool("lost", on="slurm", workers=2, idle="10m", time_limit="10m",
                      config=real_cfg)
    allocation = pool_record(pool)["job_id"]
    try:
        jobs = run_sweep(jobfns.count_steps, [{"steps": 40, "every": 5,
                                               "step_seconds": 0.25}] * 3,
                         mode="local", pool="lost", max_restarts=2, config=real_cfg)
        assert wait_for(lambda: all(len(steps_done(j.log_dir)) >= 8 for j in jobs[:2]), 120)
        node = jobs[0].info()["host"]
        try:
            _lose_node(node, jobs[0].info()["pid"])
            results = [j.result(timeout=300) for j in jobs]
        finally:
            subprocess.run([str(TESTS_DIR.parent / "scripts" / "slurm-up.sh")], check=True,
                           capture_output=True)
        for job, result in zip(jobs[:2], results[:2], strict=True):
            stopped_at = max(s for a, s in steps_done(job.log_dir) if a == 1)
            assert result["steps"] == 40 and result["attempt"] == 2, result
            assert stopped_at - 5 < result["resumed_from"] <= stopped_at
            (restart,) = job.info()["restarts"]
            assert restart["reason"] == "lost" and restart["host"] == node, restart
            assert job.info()["host"] != node
        assert results[2] == {"steps": 40, "resumed_from": 0, "attempt": 1, "world_size": 1}
        (shown,) = list_pools(real_cfg)
        assert shown.ended is None and f"Slurm job {allocation} on node" in shown.where
        assert node not in shown.where, shown.where
    finally:
        stop_pool("lost", real_cfg)


def test_a_run_on_two_nodes_requeues_at_its_time_limit_and_goes_on(real_cfg):
    """--signal's time-limit notice reaches both ranks (one a node); the run saves, is
    requeued, and goes on from its save until done."""
    from test_slurm_restarts import _assert_resumed

    real_cfg["SLURM_CONFIGS"]["cpu"]["time_in_mins"] = 1
    real_cfg["SLURM_SIGNAL_SECONDS"] = 50
    job = run_experiment(jobfns.count_steps, variant={"steps": 45, "every": 5,
                                                      "step_seconds": 1},
                         mode="slurm", n_nodes=2, tasks_per_node=1, max_restarts=4,
                         config=real_cfg)
    result = job.result(timeout=400)
    assert result["world_size"] == 2 and job.info()["restarts"]
    assert {r["reason"] for r in job.info()["restarts"]} == {"time limit"}, job.info()
    _assert_resumed(job, result, every=5)
    assert (job.log_dir / "stderr.rank1.log").exists()
    assert "#SBATCH --nodes=2" in Path(job.launch_info["backend"]["script"]).read_text()


def test_a_run_of_two_gpus_sees_both_as_slurm_granted_them(real_cfg):
    real_cfg["SLURM_CONFIGS"]["gpu"]["n_gpus"] = 2
    facts = run_experiment(jobfns.node_facts, mode="slurm", use_gpu=True,
                           config=real_cfg).result(timeout=120)
    assert facts["host"] in ("node3", "node4"), facts
    assert facts["slurm_job_gpus"] == "0,1" and facts["cuda_visible_devices"] == "0,1", facts
    assert facts["gpu_id"] == 0, facts  # (the first of the visible ones)


def test_slurms_pbs_front_ends_run_a_pbs_sweep_on_the_nodes(real_cfg, pbs_front_end):
    config = dict(real_cfg, PBS_PYTHON=sys.executable,
                  PBS_CONFIGS=dict(cpu=dict(select=1, ncpus=1, walltime=10)))
    jobs = run_sweep(jobfns.node_facts, [{"n": i} for i in range(3)], mode="pbs",
                     config=config)
    hosts = [job.result(timeout=120)["host"] for job in jobs]
    assert all(host.startswith("node") for host in hosts), hosts


def test_a_command_on_two_nodes_runs_once_on_each_with_its_rank(real_cfg):
    from easylaunch import run_command

    job = run_command(["sh", "-c", "echo rank=$RANK of $WORLD_SIZE on $(hostname)"],
                      mode="slurm", n_nodes=2, config=real_cfg)
    assert job.wait(timeout=120) is JobState.SUCCEEDED
    said = sorted((job.log_dir / f"stdout.rank{rank}.log").read_text().strip()
                  for rank in (0, 1))
    assert [line.split(" on ")[0] for line in said] == ["rank=0 of 2", "rank=1 of 2"], said
    assert len({line.split(" on ")[1] for line in said}) == 2, said  # two nodes


def test_packed_runs_in_a_gpu_allocation_get_one_granted_gpu_each(real_cfg):
    """htp on the gpu partition: one allocation of two GPUs, a worker on each; every run sees
    one of the GPUs Slurm granted the allocation, and the two run side by side."""
    real_cfg.update(SSS_SCRIPT_PATH=None)
    jobs = run_sweep(jobfns.node_facts, [{"hold": 2, "n": i} for i in range(4)], mode="htp",
                     use_gpu=True, config=real_cfg)
    seen = [job.result(timeout=180) for job in jobs]
    assert len({facts["host"] for facts in seen}) == 1, seen  # (one allocation)
    granted = seen[0]["slurm_job_gpus"].split(",")
    assert len(granted) == 2, seen
    assert all(facts["cuda_visible_devices"] in granted and facts["gpu_id"] == 0
               for facts in seen), seen
    assert {facts["cuda_visible_devices"] for facts in seen} == set(granted), seen
    script = (Path(jobs[0].launch_info["backend"]["cluster_batch_dir"]) / "htp.sbatch")
    assert "#SBATCH --gres=gpu:2\n" in script.read_text()


SCRATCH = "/var/tmp/slurm-realistic-scratch"  # (scripts/slurm-up.sh: each node's own tmpfs)


def test_a_packed_environment_reaches_every_node_of_a_two_node_run(real_cfg, small_venv):
    """sbcast copies the packed venv to each node's own scratch; each rank runs its Python."""
    pytest.importorskip("venv_pack")
    real_cfg["ENV_BROADCAST_DIR"] = SCRATCH
    job = run_experiment(jobfns.node_facts, mode="slurm", n_nodes=2, env_pack=str(small_venv),
                         config=real_cfg)
    job.result(timeout=180)
    ranks = [_rank_facts(job, rank) for rank in (0, 1)]
    assert len({r["host"] for r in ranks}) == 2, ranks
    (prefix,) = {r["prefix"] for r in ranks}
    assert prefix.startswith(f"{SCRATCH}/easylaunch-env-"), prefix
    assert not list(Path(SCRATCH).iterdir())  # (here, off the nodes, the scratch is empty)

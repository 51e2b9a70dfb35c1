"""What the cluster's nodes can give is asked at launch (sinfo, pbsnodes) and a request none can
give is refused; why a queued run waits shows in ``ls``; cancelling every run an htp
allocation holds ends the allocation. Real Slurm, its PBS front ends and sshd where they run."""

import re
import subprocess
import sys
import time
from pathlib import Path

import jobfns
import pytest
from helpers import holding_the_default_partition, node_cpus, wait_for, write_settings

from easylaunch import JobState, LaunchError, run_experiment, run_sweep
from easylaunch.modes.hosts.transport import HostError, LocalTransport
from easylaunch.modes.schedulers import nodes, pbs_queue, slurm_queue
from easylaunch.modes.schedulers.nodes import Nodes
from easylaunch.settings import load_settings
from easylaunch.tracking.refresh import cancel_entries
from easylaunch.tracking.registry import open_registry

# sinfo_command()'s output on a one-node cluster.
SINFO_HERE = "debug*|2|8000|(null)|infinite|1\n"
# A site's partitions: a default CPU one, two kinds of GPU node, a big-memory node.
SINFO_SITE = """\
short*|2|8000|(null)|1:00:00|4
gpu|32|256000|gpu:a100:4(S:0-1)|2-00:00:00|8
gpu|64|512000|gpu:h100:8(S:0-3),mps:400|2-00:00:00|2
bigmem|128|2048000|(null)|infinite|1
"""
# pbsnodes -a of this machine (Slurm's PBS front end) and of a PBS Pro server.
PBSNODES_HERE = """\
vm
    state = free
    np = 2
    ntype = cluster
    status = rectime=1795722694,state=free,slurmstate=idle,size=0kb:0kb,ncpus=2,boards=1,\
sockets=2,cores=1,threads=1,availmem=8000mb,opsys=linux 6.18.44-fc-v657 #1 smp,arch=x86_64

"""
PBSNODES_PRO = """\
node01
     Mom = node01
     ntype = PBS
     state = free
     pcpus = 36
     resources_available.host = node01
     resources_available.mem = 196608000kb
     resources_available.ncpus = 36
     resources_available.ngpus = 4
     resources_assigned.ncpus = 0

node02
     Mom = node02
     state = job-busy
     resources_available.mem = 98304000kb
     resources_available.ncpus = 16
"""


def test_sinfo_of_this_machine_and_of_a_site_is_read():
    assert nodes.parse_sinfo(SINFO_HERE) == [Nodes("debug", 1, 2, 8000, {}, None, True)]
    site = nodes.parse_sinfo(SINFO_SITE)
    assert [(n.partition, n.count, n.cpus, n.memory_mb, n.max_minutes, n.default)
            for n in site] == [("short", 4, 2, 8000, 60, True),
                               ("gpu", 8, 32, 256000, 2880, False),
                               ("gpu", 2, 64, 512000, 2880, False),
                               ("bigmem", 1, 128, 2048000, None, False)]
    assert site[1].gpus == {"": 4, "a100": 4} and site[2].gpus == {"": 8, "h100": 8}
    assert nodes.partition(site, None, "X") == site[:1]  # the default partition
    with pytest.raises(LaunchError, match=r"partition 'gpus' does not exist on the cluster; "
                                          r"its partitions: bigmem, gpu, short"):
        nodes.partition(site, "gpus", "X")


def test_a_list_of_partitions_takes_the_nodes_of_each():
    site = nodes.parse_sinfo(SINFO_SITE)
    both = nodes.partition(site, "short,bigmem", "X")
    assert both == [site[0], site[3]]
    with pytest.raises(LaunchError, match=r"partition 'gpus' does not exist"):
        nodes.partition(site, "short,gpus", "X")
    nodes.check_fits(nodes.Ask("X", (100, "c")), both)  # (bigmem's node can give it)
    with pytest.raises(LaunchError, match=r"X asks 200 CPUs on a node, but the nodes of "
                                          r"partition 'short' have at most 2"):
        nodes.check_fits(nodes.Ask("X", (200, "c")), both)  # (neither can: the first says)


def test_pbsnodes_of_the_front_end_and_of_pbs_pro_are_read():
    assert nodes.parse_pbsnodes(PBSNODES_HERE) == [Nodes("", 1, 2, 8000)]
    assert nodes.parse_pbsnodes(PBSNODES_PRO) == [Nodes("", 1, 36, 192000, {"": 4}),
                                                  Nodes("", 1, 16, 96000)]


@pytest.mark.parametrize(("ask", "said"), [
    (dict(cpus=(65, "n_cpus_per_task")),
     "asks 65 CPUs on a node, but the nodes of partition 'gpu' have at most 64: lower "
     "n_cpus_per_task to 64 or less"),
    (dict(cpus=(8, "c"), gpus=(5, "n_gpus"), gpu_type="a100"),
     "asks 5 a100 GPUs on a node, but the nodes of partition 'gpu' have at most 4: lower "
     "n_gpus"),
    (dict(cpus=(8, "c"), memory_mb=(600000, "mem")),
     "asks 600000 MB of memory on a node, but the nodes of partition 'gpu' have at most "
     "512000"),
    (dict(cpus=(40, "c"), nodes=(3, "n_nodes")),
     "asks 3 nodes of 40 CPUs, 0 GPUs, but the nodes of partition 'gpu' have at most 2: lower "
     "n_nodes to 2"),
    (dict(cpus=(8, "c"), minutes=(3000, "time_in_mins")),
     "asks 3000 minutes, but partition 'gpu' allows at most 2880: lower time_in_mins to 2880"),
])
def test_a_request_no_node_can_give_is_refused_with_the_numbers(ask, said):
    gpu = [n for n in nodes.parse_sinfo(SINFO_SITE) if n.partition == "gpu"]
    with pytest.raises(LaunchError) as refused:
        nodes.check_fits(nodes.Ask("SLURM_CONFIGS['g']", **{"cpus": (1, "c"), **ask}), gpu)
    assert str(refused.value).startswith("SLURM_CONFIGS['g'] " + said), refused.value
    nodes.check_fits(nodes.Ask("X", (64, "c"), (8, "g"), "h100", (512000, "m"),
                               (2880, "t"), (2, "n")), gpu)  # what the nodes have: taken


def test_why_a_queued_job_waits_is_read_from_the_status_answers():
    squeue = "12_0 PENDING Resources\n12_1 PENDING None\n13 RUNNING None\n" \
             "14 PENDING ReqNodeNotAvail, UnavailableNodes:vm\n"
    assert slurm_queue.parse_waits(squeue) == {
        "12_0": "Resources", "14": "ReqNodeNotAvail, UnavailableNodes:vm"}
    qstat = ("Job Id: 7.server\n    job_state = Q\n    comment = Not Running: Insufficient "
             "amount of resource: ncpus\n\nJob Id: 8.server\n    job_state = R\n"
             "    comment = Job run at Mon\n")
    answer = subprocess.CompletedProcess([], 0, qstat, "")
    assert pbs_queue.read_waits(["7.server", "8.server"], [answer], [{}]) == {
        "7.server": "Not Running: Insufficient amount of resource: ncpus"}


# -- on the real cluster -----------------------------------------------------------------------

def test_a_slurm_launch_asking_more_cpus_than_a_node_has_is_refused(slurm_cfg):
    cpus = node_cpus()
    with pytest.raises(LaunchError, match=rf"asks {cpus + 4} CPUs on a node, but the nodes of "
                                          rf"partition 'debug' have at most {cpus}: lower "
                                          rf"n_cpus_per_task to {cpus} or less"):
        run_experiment(jobfns.train, mode="slurm", config=slurm_cfg, n_cpus_per_task=cpus + 4)
    with pytest.raises(LaunchError, match=r"partition 'nope' does not exist on the cluster; "
                                          r"its partitions: cpu, debug, gpu, preempt"):
        run_experiment(jobfns.train, mode="slurm", config=slurm_cfg, partition="nope")
    assert not list(Path(slurm_cfg["LOCAL_LOG_DIR"]).glob("*/*/status.json"))  # nothing made


def test_over_ssh_the_same_request_is_refused(remote_cfg):
    cpus = node_cpus()
    with pytest.raises(LaunchError, match=rf"asks {cpus + 4} CPUs on a node, .* at most {cpus}: "
                                          r"lower n_cpus_per_task"):
        run_experiment(jobfns.train, mode="slurm", config=remote_cfg, n_cpus_per_task=cpus + 4)
    remote_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = cpus + 2
    with pytest.raises(LaunchError, match=rf"asks {cpus + 2} CPUs on a node, .* at most {cpus}: "
                                          r"lower max_num_cores_per_node \(or leave it out"):
        run_sweep(jobfns.double, [{"x": 1}], mode="htp", config=remote_cfg)


@pytest.fixture(params=["login-node", "ssh"])
def htp_cfg(request, slurm_cluster):
    """Settings submitting htp batches on this machine (a login node), or over SSH."""
    if request.param == "ssh":
        return request.getfixturevalue("remote_cfg")
    return dict(request.getfixturevalue("slurm_cfg"), SSS_SCRIPT_PATH=None)


def test_htp_takes_what_a_node_has_when_max_num_cores_per_node_is_not_set(htp_cfg):
    htp_cfg["SLURM_CONFIGS"] = {"cpu": {"time_in_mins": 10}}
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(6)], mode="htp", config=htp_cfg)
    assert [j.result(timeout=120)["y"] for j in jobs] == [0, 2, 4, 6, 8, 10]
    script = Path(jobs[0].launch_info["backend"]["cluster_batch_dir"], "htp.sbatch")
    text = script.read_text()
    cpus = min(node_cpus(), 6)  # (what the node has, up to one CPU a run)
    assert f"#SBATCH --cpus-per-task={cpus}\n" in text and f" --workers {cpus} " in text


@pytest.fixture
def node_held(slurm_cluster):
    """A job holding every CPU of the default partition, so what is submitted next waits."""
    held = subprocess.run(holding_the_default_partition(300), capture_output=True, text=True,
                          check=True).stdout.strip()
    try:
        assert wait_for(lambda: _squeue(held) == "RUNNING", 60)
        yield held
    finally:  # (a hold that never ran must not block the tests after it for 300 s)
        subprocess.run(["scancel", held], check=False)


def _squeue(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-o", "%T", "-j", job_id], capture_output=True,
                          text=True).stdout.strip()


def _cli(settings: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", str(settings),
                           *args], capture_output=True, text=True, timeout=120)


def test_ls_says_why_a_queued_run_waits(slurm_cfg, node_held, tmp_path):
    settings = write_settings(tmp_path / "settings.py", slurm_cfg)
    job = run_experiment(jobfns.train, mode="slurm", config=str(settings))
    try:
        def listed() -> str:
            return _cli(settings, "ls").stdout

        # (until slurmctld has looked at the new job, its reason is "None")
        assert wait_for(lambda: re.search(rf"^{job.id}\t.*\tqueued: (Resources|Priority)\t",
                                          listed(), re.MULTILINE), 30), listed()
    finally:
        job.cancel()


def _allocation_gone(job_id: str) -> bool:
    return _squeue(job_id) in ("", "CANCELLED", "COMPLETED", "FAILED")


def test_cancelling_a_waiting_htp_sweep_removes_its_allocation(htp_cfg, node_held, tmp_path):
    settings = write_settings(tmp_path / "settings.py", htp_cfg)
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(4)], mode="htp",
                     config=str(settings))
    allocation = jobs[0].launch_info["backend"]["slurm_job_id"]
    assert _squeue(allocation) == "PENDING"
    out = _cli(settings, "cancel", "--sweep", jobs[0].launch_info["sweep_id"])
    assert out.returncode == 0, out
    assert [j.status() for j in jobs] == [JobState.CANCELLED] * 4
    assert _allocation_gone(allocation), _squeue(allocation)


def test_cancel_stands_when_the_allocation_cannot_be_asked_about(slurm_cfg, node_held,
                                                                  tmp_path, monkeypatch):
    cfg = dict(slurm_cfg, SSS_SCRIPT_PATH=None)
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(2)], mode="htp", config=cfg)
    allocation = jobs[0].launch_info["backend"]["slurm_job_id"]
    try:
        real = LocalTransport.run_ops

        def failing(self, ops):
            if any(op["op"] == "open_tasks" for op in ops):
                raise HostError("the cluster stopped answering")
            return real(self, ops)

        monkeypatch.setattr(LocalTransport, "run_ops", failing)
        registry = open_registry(load_settings(cfg).REGISTRY_PATH)
        with pytest.warns(UserWarning, match=rf"remove it by hand: scancel {allocation}"):
            ended = cancel_entries(registry, [registry.find(j.id) for j in jobs], 30)
        assert [state for _, state, _ in ended] == [JobState.CANCELLED] * 2
        assert {registry.find(j.id).state for j in jobs} == {"cancelled"}
    finally:
        subprocess.run(["scancel", allocation], check=False)


def test_cancelling_a_running_htp_sweep_ends_its_allocation_and_some_runs_go_on(
        remote_cfg, tmp_path):
    settings = write_settings(tmp_path / "settings.py", remote_cfg)
    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 300}] * 3 + [{"seconds": 2}],
                     mode="htp", config=str(settings))
    allocation = jobs[0].launch_info["backend"]["slurm_job_id"]
    assert wait_for(lambda: [j.status() for j in jobs[:2]] == [JobState.RUNNING] * 2, 120)
    out = _cli(settings, "cancel", jobs[0].id, jobs[2].id)  # some: the others go on
    assert out.returncode == 0, out
    assert jobs[3].wait(timeout=120) is JobState.SUCCEEDED
    assert jobs[1].status() is JobState.RUNNING and _squeue(allocation) == "RUNNING"
    assert _cli(settings, "cancel", jobs[1].id).returncode == 0  # the last one: it ends
    assert wait_for(lambda: _allocation_gone(allocation), 30), _squeue(allocation)
    assert [j.status() for j in jobs] == [JobState.CANCELLED] * 3 + [JobState.SUCCEEDED]


def test_cancelling_a_waiting_pbs_htp_sweep_removes_its_allocation(remote_cfg, pbs_front_end,
                                                                   node_held, tmp_path):
    remote_cfg.update(PBS_CONFIGS={"cpu": {"select": 1, "ncpus": 1, "walltime": 10}})
    settings = write_settings(tmp_path / "settings.py", remote_cfg)
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(3)], mode="pbs_htp",
                     config=str(settings))
    allocation = jobs[0].launch_info["backend"]["pbs_job_id"]

    def qstat_state() -> str:
        out = subprocess.run(["qstat", "-f", allocation], capture_output=True, text=True)
        found = re.search(r"job_state = (\w)", out.stdout)
        return found.group(1) if found else ""

    assert qstat_state() == "Q"
    out = _cli(settings, "cancel", "--sweep", jobs[0].launch_info["sweep_id"])
    assert out.returncode == 0, out
    assert [j.status() for j in jobs] == [JobState.CANCELLED] * 3
    time.sleep(0.5)  # (qstat of Slurm's front end reads what slurmctld says now)
    assert qstat_state() not in ("Q", "R"), qstat_state()
    assert _allocation_gone(pbs_queue.short_id(allocation))

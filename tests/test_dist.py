"""easylaunch.dist with the environments of PBS and Slurm jobs set by the test."""

import subprocess
import sys

import pytest

from easylaunch import dist
from easylaunch.dist import DistError, Topology, expand_nodelist, launch_command


@pytest.mark.parametrize("text, hosts", [
    ("gpu-[01-03,07],cpu5", ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "cpu5"]),
    ("node1", ["node1"]),
    ("a[8-10]", ["a8", "a9", "a10"]),
    ("r[1-2]n[001-002]", ["r1n001", "r1n002", "r2n001", "r2n002"]),
    ("x[1],y[3-4],z", ["x1", "y3", "y4", "z"]),
])
def test_nodelist_expansion(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["gpu-[01-03", "gpu-01]", "gpu-[a-b]"])
def test_bad_nodelists(text):
    with pytest.raises(DistError):
        expand_nodelist(text)


def test_scheduler_from_the_environment_then_path():
    def nothing(_):
        return None

    assert dist.detect_scheduler({"PBS_JOBID": "1.pbs"}, nothing) == "pbs"
    assert dist.detect_scheduler({"SLURM_JOB_ID": "7"}, nothing) == "slurm"
    assert dist.detect_scheduler({}, lambda c: "/usr/bin/qsub" if c == "qsub" else None) == "pbs"
    assert dist.detect_scheduler({}, lambda c: "/bin/sbatch" if c == "sbatch" else None) == \
        "slurm"
    assert dist.detect_scheduler({}, nothing) == "none"


def test_workdir_order(tmp_path):
    assert dist.workdir({"PBS_O_WORKDIR": "/p", "SLURM_SUBMIT_DIR": "/s"}) == "/p"
    assert dist.workdir({"SLURM_SUBMIT_DIR": "/s"}) == "/s"


def pbs_env(tmp_path, gpus="4"):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x3001\nx3001\nx3002\nx3002\n")  # PBS repeats hosts per chunk
    return {"PBS_JOBID": "42.polaris", "PBS_NODEFILE": str(nodefile), "NGPU_PER_HOST": gpus,
            "PBS_O_WORKDIR": str(tmp_path)}


def test_pbs_topology_and_mpiexec(tmp_path):
    env = pbs_env(tmp_path)
    topo = dist.topology(env)
    assert topo == Topology("pbs", ("x3001", "x3002"), 4, env["PBS_NODEFILE"])
    assert topo.ngpus == 8
    assert launch_command(["python", "train.py"], topo, depth=8) == [
        "mpiexec", "--envall", "--np", "8", "--ppn", "4", "--hostfile", env["PBS_NODEFILE"],
        "--cpu-bind=depth", "--depth=8", "python", "train.py"]
    assert launch_command(["python", "t.py"], topo, cpu_bind="none")[:9] == [
        "mpiexec", "--envall", "--np", "8", "--ppn", "4", "--hostfile", env["PBS_NODEFILE"],
        "--cpu-bind=none"]


def test_slurm_topology_and_srun():
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "gpu-[01-02]", "SLURM_GPUS_ON_NODE": "4"}
    topo = dist.topology(env)
    assert topo.scheduler == "slurm" and topo.hosts == ("gpu-01", "gpu-02")
    assert launch_command(["python", "train.py"], topo) == [
        "srun", "-u", "-N", "2", "-n", "8", "--gpus-per-node=4", "python", "train.py"]
    assert launch_command(["python", "t.py"], topo, cpu_bind="cores")[-3:] == [
        "--cpu-bind=cores", "python", "t.py"]


def test_single_host_without_scheduler_uses_torchrun(monkeypatch):
    monkeypatch.setattr(dist.shutil, "which", lambda _c: None)
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2"}
    topo = dist.topology(env)
    assert topo.scheduler == "none" and topo.ngpu_per_host == 3 and topo.nhosts == 1
    assert launch_command(["python", "train.py", "--x"], topo) == [
        "torchrun", "--standalone", "--nproc-per-node=3", "train.py", "--x"]


def test_inconsistent_counts_are_refused(tmp_path):
    topo = dist.topology(pbs_env(tmp_path))
    with pytest.raises(DistError, match="7 processes cannot be spread evenly at 4 per host"):
        launch_command(["python", "t.py"], topo, total=7)
    with pytest.raises(DistError, match="need 3 hosts; the job has 2"):
        launch_command(["python", "t.py"], topo, total=12)


def test_missing_hostfile_is_named(tmp_path):
    env = dict(pbs_env(tmp_path), PBS_NODEFILE=str(tmp_path / "gone"))
    with pytest.raises(DistError, match="PBS_NODEFILE=.*gone.* cannot be read"):
        dist.topology(env)
    with pytest.raises(DistError, match="PBS_NODEFILE \\(or HOSTFILE\\) is not set"):
        launch_command(["x"], Topology("pbs", ("a",), 1, None))


def test_rank_variables_of_each_launcher():
    from easylaunch_job.environment import rank_info

    assert rank_info({}) == (0, 0, 1)
    assert rank_info({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}) == (3, 1, 8)
    assert rank_info({"PMI_RANK": "5", "PALS_LOCAL_RANKID": "1", "PMI_SIZE": "6"}) == (5, 1, 6)
    assert rank_info({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                      "OMPI_COMM_WORLD_SIZE": "4"}) == (2, 0, 4)
    assert rank_info({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2"}) == \
        (1, 1, 2)


def test_setup_torch_alone_needs_no_init():
    pytest.importorskip("torch")
    import torch.distributed

    info = dist.setup_torch(env={})
    assert (info.rank, info.world_size, info.backend, info.device) == (0, 1, None, "cpu")
    assert not torch.distributed.is_initialized()


def test_setup_torch_names_the_variables_it_looked_for():
    pytest.importorskip("torch")
    with pytest.raises(DistError, match="no rank: looked for RANK, PMI_RANK, "
                                        "OMPI_COMM_WORLD_RANK, SLURM_PROCID"):
        dist.setup_torch(env={"WORLD_SIZE": "2"})


def test_setup_torch_two_processes_with_gloo(tmp_path):
    pytest.importorskip("torch")
    code = ("import sys, torch, torch.distributed as d\n"
            "from easylaunch.dist import setup_torch\n"
            "i = setup_torch()\n"
            "t = torch.tensor([i.rank + 1.0]); d.all_reduce(t)\n"
            "print(i.rank, i.world_size, i.backend, t.item(), flush=True)\n"
            "d.destroy_process_group()\n")
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29731",
           "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    outs = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert outs == ["0 2 gloo 3.0", "1 2 gloo 3.0"]



def test_cli_prints_the_launch_command(tmp_path):
    env = dict(pbs_env(tmp_path), PATH="/usr/bin:/bin")
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "dist", "launch-cmd",
                          "--depth", "16", "--", "python", "train.py", "--lr", "1e-3"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == (f"mpiexec --envall --np 8 --ppn 4 --hostfile {env['PBS_NODEFILE']} "
                           "--cpu-bind=depth --depth=16 python train.py --lr 1e-3")
    bad = subprocess.run([sys.executable, "-m", "easylaunch.cli", "dist", "launch-cmd",
                          "--total", "6", "--", "python", "t.py"], env=env, capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "6 processes cannot be spread evenly" in bad.stderr


def test_cli_launch_runs_the_program(monkeypatch, tmp_path):
    marker = tmp_path / "ran"
    env = {"PATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}  # no qsub, no sbatch
    fake = tmp_path / "torchrun"  # stands in for torchrun on a machine without a scheduler
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {marker}\n")
    fake.chmod(0o755)
    subprocess.run([sys.executable, "-m", "easylaunch.cli", "dist", "launch", "--", "python",
                    "train.py"], env=env, check=True)
    assert marker.read_text().strip() == "--standalone --nproc-per-node=1 train.py"

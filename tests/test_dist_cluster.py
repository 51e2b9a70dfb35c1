"""Multi-process runs and environment broadcast on the local Slurm cluster."""

from pathlib import Path

import jobfns
import pytest

from easylaunch import JobState, run_experiment


def test_a_two_rank_run_all_reduces_with_gloo(slurm_cfg):
    pytest.importorskip("torch")
    job = run_experiment(jobfns.allreduce, mode="slurm", tasks_per_node=2, config=slurm_cfg)
    result = job.result(timeout=300)
    assert result == {"sum": 3.0, "world_size": 2, "backend": "gloo", "ranks": (0, 0, 2)}
    script = Path(job.launch_info["backend"]["script"]).read_text()
    assert "#SBATCH --ntasks=2" in script
    assert "exec srun -u -N 1 -n 2 --kill-on-bad-exit=1" in script
    for rank in (0, 1):  # every rank's log is kept
        assert (job.log_dir / f"stdout.rank{rank}.log").exists()
        assert (job.log_dir / f"stderr.rank{rank}.log").exists()
    assert job.info()["state"] == "succeeded"


def test_env_broadcast_runs_from_node_local_storage(slurm_cfg, small_venv, tmp_path):
    pytest.importorskip("venv_pack")
    node_local = tmp_path / "node-local"
    node_local.mkdir()
    slurm_cfg["ENV_BROADCAST_DIR"] = str(node_local)
    job = run_experiment(jobfns.where, mode="slurm", env_pack=str(small_venv), config=slurm_cfg)
    result = job.result(timeout=300)
    unpacked = next(node_local.glob("easylaunch-env-*/"))
    assert result["prefix"] == str(unpacked)
    assert result["executable"] == str(unpacked / "bin/python")
    archives = list((Path(slurm_cfg["LOCAL_LOG_DIR"]) / ".envs").glob("env-*.tar.gz"))
    assert len(archives) == 1
    made = archives[0].stat().st_mtime_ns
    again = run_experiment(jobfns.where, mode="slurm", env_pack=str(small_venv),
                           config=slurm_cfg)
    assert again.result(timeout=300)["prefix"] == str(unpacked)
    assert archives[0].stat().st_mtime_ns == made  # packed once per content


def test_a_failed_broadcast_stops_the_job_with_a_message(slurm_cfg, small_venv, tmp_path):
    pytest.importorskip("venv_pack")
    slurm_cfg["ENV_BROADCAST_DIR"] = str(tmp_path / "missing-on-the-node")
    job = run_experiment(jobfns.where, mode="slurm", env_pack=str(small_venv), config=slurm_cfg)
    assert job.wait(timeout=120) is JobState.FAILED
    assert "sbcast of the packed environment failed" in job.stderr_path.read_text()
    assert "the run did not start" in job.stderr_path.read_text()

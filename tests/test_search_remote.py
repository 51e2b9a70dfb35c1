"""``easylaunch.run_search`` where the trials run elsewhere than the driver: on the test
Slurm cluster from its login node (each trial a Slurm job, its metrics read from the shared
folder), and over SSH on a machine without a scheduler (the metrics brought over at the mode's
pace). The objective is tests/searchfns.py's (see test_search.py)."""

import json
from pathlib import Path

import optuna
import searchfns

from easylaunch import JobState, run_search

SPACE = {"x": optuna.distributions.FloatDistribution(-1.0, 1.0), "opt": ["adam", "sgd"],
         "step_s": 0.15, "steps": 20}
TOLERANCE = 0.05
SEED = 3  # (its first 10 random draws hold a variant within TOLERANCE of the optimum)


def last_step(run_dir: str) -> int:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return max(json.loads(line)["step"] for line in lines)


def check_search(search, n_trials: int) -> list[dict]:
    """The search's trials all ended, the best near the optimum, and its pruned trials were
    stopped early with their reasons; the pruned trials."""
    summary = search.summary()
    assert summary["finished"] == n_trials, summary
    best = search.best
    assert best.value - searchfns.OPTIMUM <= TOLERANCE, summary["trials"]
    assert best.job.status() is JobState.SUCCEEDED and best.job.result()["loss"] == best.value
    pruned = [t for t in summary["trials"] if t["state"] == "pruned"]
    assert pruned, summary["trials"]
    for trial in pruned:
        assert trial["reason"].startswith("pruned at step"), trial
        run = trial["runs"][-1]
        assert last_step(run) < SPACE["steps"], trial  # stopped, not run out
        info = json.loads((Path(run) / "status.json").read_text())
        assert info["state"] == "cancelled" and info["error"] == trial["reason"], info
    assert all(t["state"] in ("complete", "pruned") for t in summary["trials"])
    return pruned


def test_a_search_runs_its_trials_as_slurm_jobs(slurm_cfg):
    search = run_search(searchfns.curve, SPACE, "loss", n_trials=12, max_parallel=3,
                        min_resource=2, seed=SEED, exp_name="on-slurm", mode="slurm",
                        config=slurm_cfg)
    check_search(search, 12)
    for trial in search.trials():
        assert json.loads((Path(trial["runs"][-1]) / "launch.json").read_text())["mode"] == \
            "slurm"
        assert json.loads((Path(trial["runs"][-1]) / "status.json").read_text())["job_id"]


def test_a_search_over_ssh_prunes_from_the_metrics_brought_over(remote_cfg):
    search = run_search(searchfns.curve, SPACE, "loss", n_trials=12, max_parallel=3,
                        min_resource=2, seed=SEED, exp_name="over-ssh", mode="ssh",
                        cluster="test", config=remote_cfg)
    pruned = check_search(search, 12)
    for trial in search.trials():  # (each run's folder was on the far side)
        launch = json.loads((Path(trial["runs"][-1]) / "launch.json").read_text())
        assert launch["backend"]["job_log_dir"] != trial["runs"][-1], launch["backend"]
    # a pruned run's local record keeps why it ended, though the far side's record came back
    assert all("pruned" in json.loads((Path(t["runs"][-1]) / "status.json").read_text())
               for t in pruned)

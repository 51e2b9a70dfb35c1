"""A small sweep on the local default mode: ``python examples/sweep_local.py``.

Each variant runs in its own subprocess; results and logs land in
``<LOCAL_LOG_DIR>/lr-sweep/<date>_lr-sweep_<id>/`` (LOCAL_LOG_DIR defaults to ~/easylaunch-logs).
"""

import json
import os

from easylaunch import run_sweep


def train(doodad_config, variant):
    """A stand-in for training: writes a metrics file into the run's own folder."""
    loss = (variant["learning_rate"] - 0.01) ** 2
    print("learning rate", variant["learning_rate"], "loss", loss)
    with open(os.path.join(doodad_config.base_log_dir, "metrics.json"), "w") as f:
        json.dump({"loss": loss}, f)
    return {"loss": loss}


if __name__ == "__main__":
    jobs = run_sweep(train, variants=[dict(learning_rate=lr) for lr in (0.1, 0.01, 0.001)],
                     exp_name="lr-sweep", mode="local", max_parallel=2)
    for job in jobs:
        print(f"{job.id} {job.wait()} loss={job.result()['loss']:.6f} -> {job.log_dir}")

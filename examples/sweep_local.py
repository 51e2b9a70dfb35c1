"""A small sweep on the local default mode: ``python examples/sweep_local.py``.

Each variant runs in its own subprocess; results, logs and metrics land in
``<LOCAL_LOG_DIR>/lr-sweep/<date>_lr-sweep_<id>/`` (LOCAL_LOG_DIR defaults to ~/easylaunch-logs).
Afterwards ``easylaunch ls``, ``easylaunch plot lr-sweep --metric loss --by learning_rate``
and ``easylaunch ui`` show the sweep.
"""

import random

from easylaunch import log_metrics, run_sweep


def train(doodad_config, variant):
    """A stand-in for training: a noisy loss curve, logged at every step."""
    rng = random.Random(variant["seed"])
    loss = 1.0
    for step in range(50):
        loss *= 1 - variant["learning_rate"] * rng.uniform(0.5, 1.5)
        log_metrics(step=step, loss=loss)
    print("learning rate", variant["learning_rate"], "seed", variant["seed"], "loss", loss)
    return {"loss": loss}


if __name__ == "__main__":
    jobs = run_sweep(train, variants=[dict(learning_rate=lr, seed=seed)
                                      for lr in (0.1, 0.03, 0.01) for seed in (0, 1)],
                     exp_name="lr-sweep", mode="local", max_parallel=2)
    for job in jobs:
        print(f"{job.id} {job.wait()} loss={job.result()['loss']:.6f} -> {job.log_dir}")
    print("next: easylaunch plot lr-sweep --metric loss --by learning_rate; easylaunch ui")

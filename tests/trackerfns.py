"""The run's function of the tracker tests, written as a user writes one: a training loop that
logs its loss each step and saves a checkpoint every ``every`` steps."""

import os
import time


def train(doodad_config, variant):
    """Count to ``steps`` from the last checkpoint, logging ``loss`` at each step; write
    ``<attempt> <step>`` lines to steps.log, so a test sees how far each attempt got."""
    from easylaunch import checkpoint, flush_metrics, log_metrics

    state = checkpoint.load(default={"step": 0})
    attempt = doodad_config.extra_launch_info["attempt"]
    while state["step"] < variant["steps"]:
        time.sleep(variant["step_seconds"])
        state["step"] += 1
        log_metrics(step=state["step"], loss=1.0 / state["step"])
        with open(os.path.join(doodad_config.base_log_dir, "steps.log"), "a") as log:
            log.write(f"{attempt} {state['step']}\n")
        if state["step"] % variant["every"] == 0 or checkpoint.stop_requested():
            checkpoint.save(state)
            flush_metrics()  # (the lines up to the checkpoint are kept, whatever comes next)
    return state["step"]


def log_loss(doodad_config, variant):
    """Log ``loss`` for steps 1 to ``steps``, with no checkpoint."""
    from easylaunch import log_metrics

    for step in range(1, variant["steps"] + 1):
        log_metrics(step=step, loss=variant["lr"] / step)
    return variant["steps"]

"""The synthetic objective the search tests launch: a loss curve per step whose end is
``(x - 0.3)**2`` (0 at x=0.3 with "adam"; "sgd" adds 0.5), approached as ``2/t``, so a bad
configuration is visibly bad from its first steps."""

import time

from easylaunch import log_metrics

OPTIMUM = 0.0
STEPS = 30


def curve(doodad_config, variant):
    floor = (variant["x"] - 0.3) ** 2 + (0.0 if variant["opt"] == "adam" else 0.5)
    steps = variant.get("steps", STEPS)
    loss = floor
    for t in range(1, steps + 1):
        loss = floor + 2 / t
        log_metrics(step=t, loss=loss)
        time.sleep(variant.get("step_s", 0.05))
    return {"loss": floor, "steps": steps}


def judged(doodad_config, variant):
    """A score returned, only logged, never given, given as None, or an error, as
    ``variant["kind"]`` says."""
    kind = variant["kind"]
    if kind == "raises":
        raise ValueError("diverged")
    if kind == "silent":
        return None
    if kind == "none":
        return {"score": None}
    log_metrics(step=1, score=3.0)
    log_metrics(step=2, score=2.0)
    return {"score": 1.0} if kind == "returned" else None

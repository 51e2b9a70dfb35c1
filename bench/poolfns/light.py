"""Functions whose module imports nothing heavy."""

import time


def noop(doodad_config, variant):
    return None


def short(doodad_config, variant):
    """A short run: ``seconds`` of sleep (10 ms by default)."""
    time.sleep(variant.get("seconds", 0.01))
    return variant.get("seconds", 0.01)


def trial(doodad_config, variant):
    """A search trial of ``seconds``, its loss from x."""
    time.sleep(variant["seconds"])
    return {"loss": (variant["x"] - 0.3) ** 2}

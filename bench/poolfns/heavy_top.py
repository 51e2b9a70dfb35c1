"""A researcher's training module: torch imported at its top, as most are."""

import time

import torch


def first_line(doodad_config, variant):
    """When the function's first line ran (time.time()), and torch's version."""
    return {"at": time.time(), "torch": torch.__version__}

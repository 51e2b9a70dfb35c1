"""Which GPUs this machine offers to local runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping


def chosen_gpu_ids(configured: list | None = None,
                   env: Mapping[str, str] | None = None) -> list[str] | None:
    """LOCAL_GPU_IDS if set, else CUDA_VISIBLE_DEVICES (of ``env``, default this process's);
    None when neither chooses (every GPU ``nvidia-smi`` lists is there to use)."""
    if configured is not None:
        return [str(g) for g in configured]
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    return None


def local_gpu_ids(configured: list | None = None,
                  env: Mapping[str, str] | None = None) -> list[str]:
    """LOCAL_GPU_IDS if set, else CUDA_VISIBLE_DEVICES (of ``env``, default this process's),
    else what ``nvidia-smi`` lists."""
    chosen = chosen_gpu_ids(configured, env)
    if chosen is not None:
        return chosen
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]

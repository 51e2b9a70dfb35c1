"""What the benches that run batch modes on the local cluster share."""

from __future__ import annotations

import os
import subprocess


def submit_copied_batch(jobs: list) -> None:
    """Play the user's copy of a batch folder to the cluster (this machine) and submit it."""
    backend = jobs[0].launch_info["backend"]
    os.makedirs(os.path.dirname(backend["cluster_batch_dir"]), exist_ok=True)
    os.rename(backend["batch_dir"], backend["cluster_batch_dir"])
    subprocess.run(["bash", f"{backend['cluster_batch_dir']}/submit.sh"], check=True,
                   stdout=subprocess.DEVNULL)

"""``job.pyz submit``: a batch folder's ``submit.sh`` submits each job with it, which records
the job id the scheduler's submit command printed (read as :mod:`.schedulers` says)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from easylaunch_job.records import write_bytes_atomic
from easylaunch_job.schedulers import SCHEDULERS, JobSide, scheduler_named


def submit_and_record(side: JobSide, ids_file: str, run_ids: Sequence[str],
                      argv: Sequence[str]) -> int:
    """Run ``side``'s submit command ``argv``; add ``<run id> <job id>`` lines for ``run_ids``
    to ``ids_file`` (a batch folder's job_ids.txt). 1, with the command's own words, if it
    failed."""
    try:
        out = subprocess.run(list(argv), stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        sys.stderr.write(f"easylaunch: {argv[0]} could not start: {exc}\n")
        return 1
    job = side.job_id(out.stdout) if out.returncode == 0 else ""
    if not job:
        sys.stderr.write(f"easylaunch: {argv[0]} printed no job id (exit {out.returncode}): "
                         f"{out.stdout.strip()!r}\n")
        return 1
    try:
        with open(ids_file) as f:
            earlier = f.read()
    except FileNotFoundError:
        earlier = ""
    write_bytes_atomic(ids_file, (earlier + "".join(f"{run} {job}\n" for run in run_ids)).encode())
    print(f"submitted {', '.join(run_ids)} as {side.label} job {job}")
    return 0


def main(args: list[str]) -> int:
    """``job.pyz submit SCHEDULER IDS_FILE RUN_IDS ARGV...`` (RUN_IDS comma-separated)."""
    if len(args) < 4 or args[0] not in SCHEDULERS:
        sys.stderr.write(f"usage: job.pyz submit {{{','.join(SCHEDULERS)}}} IDS_FILE "
                         "RUN_ID[,RUN_ID...] COMMAND...\n")
        return 2
    run_ids = [r for r in args[2].split(",") if r]
    return submit_and_record(scheduler_named(args[0]), args[1], run_ids, args[3:])

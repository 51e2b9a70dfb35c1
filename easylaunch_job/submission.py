"""The schedulers' submit commands and the job ids they print, written once: the launching side,
the job side's resubmission, the packer and a batch folder's ``submit.sh`` (through
``job.pyz submit``) all submit with these."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence

from easylaunch_job.records import write_bytes_atomic

# What ``sbatch --parsable`` prints (``123`` or ``123;cluster``), and what plain ``sbatch``
# prints (``Submitted batch job 123``, as the seed's ht_helper command is submitted).
_SBATCH_ID = re.compile(r"(?:Submitted batch job )?(\d+)(?:;\S*)?")
# What qsub prints: ``123.server`` for a job, ``123[].server`` for an array, ``123`` from front
# ends that print only the number.
_QSUB_ID = re.compile(r"\d+(?:\[\])?(?:\.[\w.-]+)?")


def sbatch_command(script: str, *options: str) -> list[str]:
    """``sbatch --parsable [options] SCRIPT``."""
    return ["sbatch", "--parsable", *options, script]


def sbatch_job_id(out: str) -> str:
    """The job id sbatch printed on its last line; "" when it printed none."""
    lines = out.strip().splitlines()
    found = _SBATCH_ID.fullmatch(lines[-1].strip()) if lines else None
    return found.group(1) if found else ""


def qsub_command(script: str, *options: str) -> list[str]:
    """``qsub [options] SCRIPT`` (run it in the script's folder: PBS writes the job's output
    file where it is submitted from)."""
    return ["qsub", *options, script]


def qsub_job_id(out: str) -> str:
    """The job id qsub printed on its last line; "" when it printed none."""
    lines = out.strip().splitlines()
    last = lines[-1].strip() if lines else ""
    return last if _QSUB_ID.fullmatch(last) else ""


def submit_and_record(ids_file: str, run_ids: Sequence[str], argv: Sequence[str]) -> int:
    """Run a submit command (sbatch, qsub); add ``<run id> <job id>`` lines for ``run_ids`` to
    ``ids_file`` (a batch folder's job_ids.txt). 1, with the command's own words, if it
    failed."""
    try:
        out = subprocess.run(list(argv), stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        sys.stderr.write(f"easylaunch: {argv[0]} could not start: {exc}\n")
        return 1
    qsub = os.path.basename(argv[0]) == "qsub"
    job = (qsub_job_id if qsub else sbatch_job_id)(out.stdout) if out.returncode == 0 else ""
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
    print(f"submitted {', '.join(run_ids)} as {'PBS' if qsub else 'Slurm'} job {job}")
    return 0


def main(args: list[str]) -> int:
    """``job.pyz submit IDS_FILE RUN_IDS ARGV...`` (RUN_IDS comma-separated)."""
    if len(args) < 3:
        sys.stderr.write("usage: job.pyz submit IDS_FILE RUN_ID[,RUN_ID...] COMMAND...\n")
        return 2
    return submit_and_record(args[0], [r for r in args[1].split(",") if r], args[2:])

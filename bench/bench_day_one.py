"""Day one: a newcomer's sweep script (6 variants, one of which raises) launched from a fresh
clone's ``.venv`` (as ``scripts/example.sh`` makes it) on ``local``, ``slurm`` and ``htp`` from
this machine as the cluster's login node, with no settings file at all.

For each mode: whether every run ended with its results in hand (5 succeeded, 1 failed with
its error), and the wall time of ``python sweep.py MODE`` beside the same script calling the
function in a plain loop (the baseline, measured in the same round).

Usage: python bench/bench_day_one.py   (needs the local Slurm cluster: scripts/slurm-up.sh)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent('''\
    import json, math, sys

    from easylaunch import run_sweep

    def train(doodad_config, variant):
        if variant["lr"] == 0.3:
            raise ValueError("lr too large")
        return {"loss": math.exp(-variant["lr"] * 10)}

    def ended(calls):
        counts = {}
        for call in calls:
            try:
                call()
                counts["succeeded"] = counts.get("succeeded", 0) + 1
            except Exception as exc:
                counts[type(exc).__name__] = counts.get(type(exc).__name__, 0) + 1
        return counts

    if __name__ == "__main__":
        variants = [dict(lr=lr) for lr in (0.01, 0.03, 0.1, 0.2, 0.3, 0.5)]
        if sys.argv[1] == "plain":  # the baseline: the same calls in a plain loop
            calls = [lambda v=v: train(None, v) for v in variants]
        else:
            jobs = run_sweep(train, variants, exp_name="first-sweep", mode=sys.argv[1])
            calls = [lambda job=job: job.result(timeout=600) for job in jobs]
        print(json.dumps(ended(calls)))
''')


def run(python: Path, project: Path, mode: str) -> tuple[float, str]:
    env = dict(os.environ, HOME=str(project / "home"), EASYLAUNCH_CONFIG="")
    t = time.perf_counter()
    out = subprocess.run([str(python), "sweep.py", mode], cwd=project, env=env,
                         capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t
    last = out.stdout.strip().splitlines()[-1:] or [out.stderr.strip()[-300:]]
    return wall, last[0] if out.returncode == 0 else f"exit {out.returncode}: {last[0]}"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-day-one-") as tmp:
        clone = Path(tmp) / "easylaunch"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        subprocess.run(["./scripts/example.sh"], cwd=clone, check=True, capture_output=True)
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "sweep.py").write_text(SCRIPT)
        python = clone / ".venv" / "bin" / "python"
        base, _ = run(python, project, "plain")
        print(f"plain loop (baseline) {base:6.2f} s")
        for mode in ("local", "slurm", "htp"):
            wall, ended = run(python, project, mode)
            good = ended.startswith("{") and json.loads(ended) == {"succeeded": 5,
                                                                    "ValueError": 1}
            print(f"{mode:6} {wall:6.2f} s  {wall / base:6.1f}x  runs ended: {ended}  "
                  f"{'results in hand' if good else 'NOT as expected'}; settings changed: 0")


if __name__ == "__main__":
    sys.exit(main())

"""Functions the tests launch. They live in a code directory (CODE_DIRS_TO_MOUNT), so runs import
them from the code snapshot, the way users' own modules travel."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

RELEASE = "release"  # the file a wait_for_release run waits for


def train(doodad_config, variant):
    print("lr", variant.get("learning_rate"), "logs to", doodad_config.base_log_dir)
    return {"loss": 0.1, "lr": variant.get("learning_rate")}


def fail(doodad_config, variant):
    raise ValueError(f"bad learning rate {variant.get('learning_rate')}")


def echo(doodad_config, variant):
    return {"variant": variant, "config": doodad_config._asdict(), "pid": os.getpid(),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "cwd": os.getcwd()}


def sleep_with_child(doodad_config, variant):
    """Start a grandchild process, note both pids, then sleep (to be cancelled)."""
    child = subprocess.Popen(["sleep", "300"])
    with open(os.path.join(doodad_config.base_log_dir, "pids"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}\n")
    time.sleep(300)


def interval(doodad_config, variant):
    start = time.time()
    time.sleep(variant.get("seconds", 0.4))
    return start, time.time()


def read_mounted(doodad_config, variant):
    with open(os.path.join(variant["mount_point"], "data.txt")) as f:
        return f.read()


def write_file(doodad_config, variant):
    path = os.path.join(doodad_config.base_log_dir, "output.txt")
    with open(path, "w") as f:
        f.write(variant["text"])
    return path


def check_data(doodad_config, variant):
    with open(os.path.join(variant["mount_point"], "data.txt")) as f:
        data = f.read()
    if data != "good":
        raise ValueError(f"bad data: {data!r}")
    return data


def print_slowly(doodad_config, variant):
    """Print lines 0.2 s apart; with ``hold``, then wait until the test lets the run finish."""
    for i in range(variant.get("lines", 5)):
        print(f"line {i}")
        time.sleep(0.2)
    if variant.get("hold"):
        _wait_for(Path(doodad_config.base_log_dir) / RELEASE, 60)


class ShapeError(Exception):
    """An exception whose __init__ needs more than its message (it cannot be rebuilt)."""

    def __init__(self, message, shape):
        super().__init__(message)
        self.shape = shape


def raise_shape_error(doodad_config, variant):
    raise ShapeError("wrong shape", (2, 3))


def leave_background_child(doodad_config, variant):
    child = subprocess.Popen(["sleep", "300"], start_new_session=False)
    return child.pid


def kill_self(doodad_config, variant):
    """Die by ``signal``; with ``and_parent``, the runner's supervisor first (nothing on the
    run's side is left to record the end)."""
    if variant.get("and_parent"):
        os.kill(os.getppid(), variant["signal"])
    os.kill(os.getpid(), variant["signal"])
    time.sleep(5)


def write_into_mount(doodad_config, variant):
    with open(os.path.join(variant["mount_point"], "written.txt"), "w") as f:
        f.write(variant["text"])


def fail_unless_exists(doodad_config, variant):
    if not os.path.exists(variant["path"]):
        raise FileNotFoundError(variant["path"])
    return variant["path"]


def allreduce(doodad_config, variant):
    """Each rank contributes rank + 1; every rank checks the sum (gloo on the CPU)."""
    import torch
    import torch.distributed as dist

    from easylaunch.dist import setup_torch

    info = setup_torch()
    value = torch.tensor([float(info.rank + 1)])
    dist.all_reduce(value)
    expected = info.world_size * (info.world_size + 1) / 2
    assert value.item() == expected, (value.item(), expected)
    extra = doodad_config.extra_launch_info
    dist.destroy_process_group()
    return {"sum": value.item(), "world_size": info.world_size, "backend": info.backend,
            "ranks": (extra["rank"], extra["local_rank"], extra["world_size"])}


def where(doodad_config, variant):
    import sys

    return {"prefix": sys.prefix, "executable": sys.executable}


def wait_for_release(doodad_config, variant):
    """Print, write a file, then wait until the test lets the run finish."""
    print("started", variant.get("tag"), flush=True)
    out = Path(doodad_config.base_log_dir)
    (out / "progress.txt").write_text("halfway\n")
    _wait_for(out / RELEASE, variant.get("limit", 60))
    return {"module_file": __file__, "tag": variant.get("tag"), "gpu": doodad_config.use_gpu}


def _wait_for(release: Path, limit: float) -> None:
    deadline = time.time() + limit
    while not release.exists():
        if time.time() > deadline:
            raise TimeoutError("never released")
        time.sleep(0.05)


def quick(doodad_config, variant):
    return {"module_file": __file__, "tag": variant.get("tag"), "cwd": os.getcwd(),
            "which_python": shutil.which("python3")}


def big_result(doodad_config, variant):
    return b"x" * variant["bytes"]


def fill_disk(doodad_config, variant):
    """Fill the file system of the run folder, then return (the outcome has no room left)."""
    with open(os.path.join(doodad_config.base_log_dir, "filler.bin"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return "filled"


def exit_now(doodad_config, variant):
    os._exit(variant["code"])


def sleep_a_while(doodad_config, variant):
    time.sleep(variant.get("seconds", 2))
    return "slept"


def which_code(doodad_config, variant):
    import where_am_i  # only in the cluster's copy of the code folder

    return {"where": where_am_i.WHERE,
            "slurm_job_id": doodad_config.extra_launch_info.get("slurm-job-id")}


def loaded(doodad_config, variant):
    """Which of ``modules`` were imported when the run started (then it imports
    ``then_import``)."""
    import importlib
    import sys

    found = {name: name in sys.modules for name in variant["modules"]}
    for name in variant.get("then_import", []):
        importlib.import_module(name)
    return found


def double(doodad_config, variant):
    print("doubling", variant["x"])
    return {"x": variant["x"], "y": 2 * variant["x"]}


def count_steps(doodad_config, variant):
    """Count to ``steps`` (one every ``step_seconds``), saving a checkpoint every ``every``
    steps and when the run is being stopped; rank 0 logs ``<attempt> <step>`` per step to
    steps.log, so a test sees which steps each attempt did. Fails on attempt ``fail_on``."""
    from easylaunch import checkpoint

    info = doodad_config.extra_launch_info
    if info["attempt"] == variant.get("fail_on"):
        raise RuntimeError(f"attempt {info['attempt']} fails, as asked")
    state = checkpoint.load(default={"step": 0})
    resumed_from = state["step"]
    log_path = os.path.join(doodad_config.base_log_dir, "steps.log")
    while state["step"] < variant["steps"]:
        time.sleep(variant.get("step_seconds", 0.05))
        state["step"] += 1
        if info["rank"] == 0:
            with open(log_path, "a") as log:
                log.write(f"{info['attempt']} {state['step']}\n")
        if state["step"] % variant.get("every", 1) == 0 or checkpoint.stop_requested():
            checkpoint.save(state)
    return {"steps": state["step"], "resumed_from": resumed_from, "attempt": info["attempt"],
            "world_size": info["world_size"]}


def steps_done(log_dir) -> list[tuple[int, int]]:
    """The (attempt, step) lines a count_steps run wrote so far."""
    path = Path(log_dir) / "steps.log"
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]


def log_curve(doodad_config, variant):
    """Log ``steps`` points of loss (falling, offset by the seed) and acc with
    easylaunch.log_metrics (``fail_at``: raise at that step instead); return whether any line
    was on disk before the function ended (they are buffered) and a dict result."""
    from easylaunch import log_metrics

    steps = variant.get("steps", 5)
    for step in range(steps):
        if step == variant.get("fail_at"):
            raise RuntimeError(f"diverged at step {step}")
        log_metrics(step=step, loss=variant["lr"] * (steps - step) + variant.get("seed", 0),
                    acc=step / steps)
    on_disk = os.path.exists(os.path.join(doodad_config.base_log_dir, "metrics.jsonl"))
    return {"on_disk_before_end": on_disk, "steps": steps, "lr": variant["lr"]}


def die_on_attempts(doodad_config, variant):
    """SIGKILL itself on the attempts listed in ``die_on`` (as the OOM killer would); else
    return its attempt."""
    import signal

    attempt = doodad_config.extra_launch_info["attempt"]
    if attempt in variant.get("die_on", []):
        os.kill(os.getpid(), signal.SIGKILL)
    return attempt


def process_facts(doodad_config, variant):
    """What a run's process sees of itself: ids, session, folder, input, environment."""
    import random

    supervisor = os.getppid()
    with open(f"/proc/{supervisor}/stat") as f:  # (the supervising runner's parent)
        starter = int(f.read().rsplit(")", 1)[1].split()[1])
    print("facts printed")
    return {"pid": os.getpid(), "supervisor": supervisor, "starter": starter,
            "pgid": os.getpgrp(), "sid": os.getsid(0), "cwd": os.getcwd(),
            "stdin": sys.stdin.read(), "random": random.random(), "hash": hash("easylaunch"),
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "pythonpath": os.environ.get("PYTHONPATH", ""), "argv": sys.argv}


def node_facts(doodad_config, variant):
    """Where this rank runs and what it was given: host, rank, world size, GPUs (printed as
    one JSON line too, so that every rank's log says it)."""
    import json

    extra = doodad_config.extra_launch_info
    facts = {"host": os.uname().nodename, "prefix": sys.prefix, "rank": extra["rank"],
             "world_size": extra["world_size"], "gpu_id": doodad_config.gpu_id,
             "physical_gpu_id": extra.get("physical_gpu_id"),
             "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "slurm_job_gpus": os.environ.get("SLURM_JOB_GPUS"),
             "slurm_nodelist": os.environ.get("SLURM_JOB_NODELIST")}
    print(json.dumps(facts), flush=True)
    time.sleep(variant.get("hold", 0))  # (keeps its GPU a while: the next run gets another)
    return facts


def whoami(doodad_config, variant):
    """The user this run runs as."""
    import getpass

    return getpass.getuser()

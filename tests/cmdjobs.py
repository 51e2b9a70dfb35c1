#!/usr/bin/env python3
"""Commands the command-run tests launch (run in the snapshot of tests/, like any command):

``count STEPS SECONDS``: count to STEPS, a step every SECONDS, going on from the count saved in
$EASYLAUNCH_CHECKPOINT_DIR; on $EASYLAUNCH_STOP_SIGNAL it saves the count and exits.
``ranks``: write this process's RANK, LOCAL_RANK and WORLD_SIZE to the run folder.
"""

import os
import signal
import sys
import time


def count(steps: int, seconds: float) -> int:
    folder = os.environ["EASYLAUNCH_CHECKPOINT_DIR"]
    os.makedirs(folder, exist_ok=True)
    saved = os.path.join(folder, "count.txt")
    done = 0
    if os.path.exists(saved):
        with open(saved) as f:
            done = int(f.read())
    print(f"attempt {os.environ['EASYLAUNCH_ATTEMPT']} starts at {done}", flush=True)

    def save_and_stop(signum, frame):
        with open(saved + ".tmp", "w") as f:
            f.write(str(done))
        os.replace(saved + ".tmp", saved)
        print(f"stopped at {done}", flush=True)
        sys.exit(0)

    signal.signal(signal.Signals["SIG" + os.environ["EASYLAUNCH_STOP_SIGNAL"]], save_and_stop)
    while done < steps:
        time.sleep(seconds)
        done += 1
        with open(os.path.join(os.environ["EASYLAUNCH_RUN_DIR"], "steps.txt"), "a") as f:
            f.write(f"{os.environ['EASYLAUNCH_ATTEMPT']} {done}\n")
    print(f"counted to {done}", flush=True)
    return 0


def ranks() -> int:
    rank = os.environ["RANK"]
    with open(os.path.join(os.environ["EASYLAUNCH_RUN_DIR"], f"rank-{rank}.txt"), "w") as f:
        f.write(f"{rank} {os.environ['LOCAL_RANK']} {os.environ['WORLD_SIZE']}\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "count":
        sys.exit(count(int(sys.argv[2]), float(sys.argv[3])))
    sys.exit(ranks())

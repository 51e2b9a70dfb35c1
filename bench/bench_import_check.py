"""The launch-time import check (easylaunch/importable.py) for a function whose script imports
30 standard-library modules and numpy at its top, beside pickling that function with
cloudpickle (what every launch does anyway), in a fresh process each round.

Goal: the check costs <= 5 ms a launch, its first call in a process (reading site-packages'
.pth files) included.

Usage: python bench/bench_import_check.py [--rounds N]   (numpy must be importable)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

ROUND = r'''
import array, base64, bisect, calendar, cmath, collections, csv, ctypes, datetime, decimal
import fractions, functools, hashlib, heapq, itertools, json, math, operator, os, pickle
import random, re, select, socket, statistics, string, struct, time, uuid, zlib
import numpy
import cloudpickle, time as clock
from easylaunch.runs import payload
from easylaunch.runs.importable import sorted_out

MODULES = [array, base64, bisect, calendar, cmath, collections, csv, ctypes, datetime, decimal,
           fractions, functools, hashlib, heapq, itertools, json, math, operator, os, pickle,
           random, re, select, socket, statistics, string, struct, time, uuid, zlib, numpy]

def train(doodad_config, variant):
    return [m.__name__ for m in MODULES]

t = clock.perf_counter(); _, modules = payload._dumps(train); pickled = clock.perf_counter() - t
t = clock.perf_counter(); first = sorted_out(modules, [], None); cold = clock.perf_counter() - t
t = clock.perf_counter()
for _ in range(100):
    assert sorted_out(modules, [], None) == first == ([], {}), first
warm = (clock.perf_counter() - t) / 100
print(json.dumps({"modules": len(modules), "pickle": pickled, "cold": cold, "warm": warm}))
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = [json.loads(subprocess.run([sys.executable, "-c", ROUND], check=True,
                                        capture_output=True, text=True).stdout)
              for _ in range(parser.parse_args().rounds)]
    ms = {key: statistics.median(r[key] for r in rounds) * 1000
          for key in ("pickle", "cold", "warm")}
    print(f"{rounds[0]['modules']} modules named by the pickled function, "
          f"{len(rounds)} fresh processes (medians):")
    print(f"  pickling the function (baseline) {ms['pickle']:7.2f} ms")
    print(f"  import check, first in a process {ms['cold']:7.2f} ms  "
          f"{ms['cold'] / ms['pickle']:.2f}x pickling (goal <= 5 ms)")
    print(f"  import check, later launches     {ms['warm']:7.3f} ms  "
          f"{ms['warm'] / ms['pickle']:.2f}x pickling")


if __name__ == "__main__":
    main()

"""The dashboard's curves at scale: a sweep page of 200 runs x 1,000 logged steps, and an
overlay of 20 runs picked from 3 sweeps (goal: curves drawn and interactive <= 1 s in
Chromium), with the bytes each page brings.

A registry of three sweeps (200, 40 and 40 runs; each run's metrics.jsonl holds 1,000 steps
of a loss and an accuracy) is served by `easylaunch ui --port 0`. Drawn: from navigation to
the chart holding every run's curve, as the page's own clock (performance.now(), Navigation
Timing's origin) sees it; the first visit (the server reads the run folders) is printed
apart from the medians of the later ones (their folders read already, unchanged). Bytes:
the document and every resource as transferred (gzip where the server compresses).
Usage: python bench/bench_dashboard_curves.py [--rounds N] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium.webdriver.support.ui import WebDriverWait

from easylaunch.tracking.registry import Registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_dashboard import start_chromium  # noqa: E402 - the tests' Chromium, started alike

SWEEPS = {"big": 200, "second": 40, "third": 40}
DRAWN = """
const f = document.querySelector("figure.curve");
if (!f || !f.plot || f.plot.series.length - 1 !== arguments[0]) return null;
const bytes = [...performance.getEntriesByType("navigation"),
               ...performance.getEntriesByType("resource")]
  .reduce((sum, e) => sum + e.transferSize, 0);
return [performance.now(), bytes, f.chart.curve.per_point];
"""


def fill(folder: Path, steps: int) -> tuple[Path, dict[str, list[str]]]:
    """A settings file naming a registry of SWEEPS, their runs' folders holding metrics."""
    now, ids, rows = time.time(), {}, []
    for s, (sweep, runs) in enumerate(SWEEPS.items()):
        ids[sweep] = []
        for i in range(runs):
            run_id = f"{s:02x}{i:06x}"
            run_dir = folder / "logs" / sweep / run_id
            run_dir.mkdir(parents=True)
            lr = 10 ** -(1 + i % 4)
            run_dir.joinpath("metrics.jsonl").write_text("".join(
                json.dumps({"step": t, "loss": 1 / (1 + lr * t * (1 + i / runs)),
                            "acc": t / steps}) + "\n" for t in range(steps)))
            ids[sweep].append(run_id)
            rows.append(dict(id=run_id, exp_name=f"bench-{sweep}", mode="local",
                             state="succeeded", log_dir=str(run_dir), sweep=f"sweep-{sweep}",
                             variant={"lr": lr, "seed": i}, created=now - s * 1000 - i))
    Registry(folder / "registry.sqlite3").add(rows)
    config = folder / "settings.py"
    config.write_text(f"REGISTRY_PATH = {str(folder / 'registry.sqlite3')!r}\n"
                      f"LOCAL_LOG_DIR = {str(folder / 'logs')!r}\n")
    return config, ids


def drawn(driver, url: str, runs: int) -> tuple[float, float, float, float]:
    """Seconds from navigation to the drawn chart (the page's clock), the wall clock around
    it, the bytes brought and the chart's steps per point."""
    start = time.perf_counter()
    driver.get(url)
    at, size, per_point = WebDriverWait(driver, 60, poll_frequency=0.01).until(
        lambda d: d.execute_script(DRAWN, runs))
    return at / 1000, time.perf_counter() - start, size, per_point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config, ids = fill(Path(tmp), args.steps)
        picked = ids["big"][:8] + ids["second"][:6] + ids["third"][:6]
        pages = {"sweep page, 200 runs": ("/sweep/sweep-big", 200),
                 "overlay, 20 runs of 3 sweeps": ("/compare?runs=" + ",".join(picked), 20)}
        server = subprocess.Popen([sys.executable, "-m", "easylaunch.cli", "--config",
                                   str(config), "ui", "--port", "0"], stdout=subprocess.PIPE,
                                  text=True)
        url = server.stdout.readline().split()[2]
        base = url.split("/?token=")[0]
        driver = start_chromium(Path(tmp) / "profile")
        try:
            driver.get(url)  # (the token, kept as a cookie)
            times: dict[str, list[tuple]] = {name: [] for name in pages}
            for _ in range(args.rounds + 1):
                for name, (path, runs) in pages.items():
                    times[name].append(drawn(driver, base + path, runs))
        finally:
            driver.quit()
            server.terminate()
            server.wait()
    print(f"{args.steps} steps a run; first visit, then medians of {args.rounds} (goal <= 1000 "
          "ms drawn)")
    print(f"{'':30} {'drawn ms':>9} {'wall ms':>8} {'KB':>6} | first: {'drawn ms':>8} "
          f"{'wall ms':>8} | steps a point")
    for name, rows in times.items():
        first, later = rows[0], rows[1:]
        med = [statistics.median(column) for column in zip(*later, strict=True)]
        print(f"{name:30} {med[0] * 1000:9.0f} {med[1] * 1000:8.0f} {med[2] / 1024:6.0f} | "
              f"{'':7}{first[0] * 1000:8.0f} {first[1] * 1000:8.0f} | {med[3]:.1f}")


if __name__ == "__main__":
    main()

"""The dashboard's runs page over a registry of 10,000 runs (goal: <= 1 s to first byte and to
a fully rendered page).

`easylaunch ui --port 0` serves a registry filled as bench_registry.py fills it. Time to first
byte: httpx, from the request to the first body byte. Rendered: headless Chromium (Debian's,
through selenium) from navigation to `document.readyState == "complete"` with the table's rows
present, as the browser's own Navigation Timing sees it and as a wall clock around selenium's
call does. The first page, a page deep in the list and a filtered page, several rounds each;
medians (the server's very first answer, which compiles the templates, is printed apart).
Usage: python bench/bench_dashboard.py [--runs N] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from bench_registry import filled_settings
from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_dashboard import start_chromium  # noqa: E402 - the tests' Chromium, started alike

RENDERED = ("return document.readyState === 'complete' && "
            "document.querySelectorAll('table.runs tbody tr').length > 0")
NAVIGATION = ("const n = performance.getEntriesByType('navigation')[0]; "
              "return [n.responseStart - n.startTime, n.loadEventEnd - n.startTime];")


def first_byte(client: httpx.Client, path: str) -> tuple[float, float]:
    """Seconds to the first body byte and to the whole answer."""
    start = time.perf_counter()
    with client.stream("GET", path) as answer:
        chunks = answer.iter_raw()
        next(chunks)
        first = time.perf_counter() - start
        for _ in chunks:
            pass
    assert answer.status_code == 200, answer.status_code
    return first, time.perf_counter() - start


def rendered(driver: webdriver.Chrome, url: str) -> tuple[float, float, float]:
    """Navigation Timing's first byte and load end, and the wall clock to a rendered table."""
    start = time.perf_counter()
    driver.get(url)
    WebDriverWait(driver, 30, poll_frequency=0.01).until(lambda d: d.execute_script(RENDERED))
    wall = time.perf_counter() - start
    ttfb, loaded = driver.execute_script(NAVIGATION)
    return ttfb / 1000, loaded / 1000, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with filled_settings(args.runs) as config:
        server = subprocess.Popen([sys.executable, "-m", "easylaunch.cli", "--config",
                                   str(config), "ui", "--port", "0"], stdout=subprocess.PIPE,
                                  text=True)
        url = server.stdout.readline().split()[2]
        base, token = url.split("/?token=")
        pages = {"first page": "/", "page 150": "/?page=150", "filtered": "/?exp=exp-3&page=2"}
        driver = start_chromium(config.parent / "profile")
        try:
            client = httpx.Client(base_url=base, timeout=60)
            client.cookies.set(f"easylaunch-ui-{base.rsplit(':', 1)[1]}", token)
            cold = first_byte(client, "/")
            driver.get(url)  # (the token, kept as a cookie)
            times: dict[str, list[tuple]] = {name: [] for name in pages}
            for _ in range(args.rounds):
                for name, path in pages.items():
                    times[name].append((*first_byte(client, path), *rendered(driver, base + path)))
        finally:
            driver.quit()
            server.terminate()
            server.wait()
    print(f"registry of {args.runs} runs, {args.rounds} rounds, medians in ms (goal <= 1000); "
          f"the server's first answer: first byte {cold[0] * 1000:.0f}, whole {cold[1] * 1000:.0f}")
    print(f"{'':12} {'first byte':>10} {'whole':>7} | browser: {'first byte':>10} "
          f"{'loaded':>7} {'rendered (wall)':>16}")
    for name, rows in times.items():
        ms = [statistics.median(column) * 1000 for column in zip(*rows, strict=True)]
        print(f"{name:12} {ms[0]:10.0f} {ms[1]:7.0f} | {'':8} {ms[2]:10.0f} {ms[3]:7.0f} "
              f"{ms[4]:16.0f}")


if __name__ == "__main__":
    main()

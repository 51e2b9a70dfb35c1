"""The web dashboard (`easylaunch ui`), driven as a user would: the real command serving a real
registry, Debian's headless Chromium through selenium, and httpx for what a browser would not
send. Screenshots go to $EASYLAUNCH_ARTIFACTS (else the test's tmp_path)."""

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jobfns
import optuna
import pytest
import searchfns
from conftest import settings_file
from helpers import alive, copy_to_cluster, run_pids, wait_for
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from easylaunch import JobState, run_command, run_experiment, run_search, run_sweep
from easylaunch.cli.shared import parse_since
from easylaunch.dashboard import hparams, searches, views
from easylaunch.dashboard.curves import align
from easylaunch.errors import EasyLaunchError
from easylaunch.results.readers import read_series
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.registry import NoSuchRun, Registry

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--window-size=1400,1000")
SCRIPT = "<script>alert(1)</script>"


def start_chromium(profile: Path) -> webdriver.Chrome:
    """Headless Chromium from Debian's packages (selenium is given the driver: it downloads
    nothing)."""
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@dataclass
class Dashboard:
    """A running `easylaunch ui`: its URL with the token, and its settings file."""

    proc: subprocess.Popen
    url: str  # http://127.0.0.1:PORT/?token=...
    config: str

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    @property
    def port(self) -> str:
        return self.base.rsplit(":", 1)[1]

    @property
    def token(self) -> str:
        return self.url.rsplit("token=", 1)[1]

    def client(self) -> httpx.Client:
        """An HTTP client holding the dashboard's cookie, as a browser that opened the URL."""
        client = httpx.Client(base_url=self.base, timeout=30)
        client.cookies.set(f"easylaunch-ui-{self.port}", self.token)
        return client


def ui(config: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "easylaunch.cli", "--config", config, "ui",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def serving(config: str) -> Iterator[Dashboard]:
    """`easylaunch ui --port 0` over the registry of the settings file ``config``."""
    proc = ui(config, "--port", "0")
    line = proc.stdout.readline()
    assert line.startswith("easylaunch ui: http://127.0.0.1:"), line + proc.stderr.read()
    yield Dashboard(proc, line.split()[2], config)
    proc.terminate()
    # (uvicorn ends by the signal it stopped for)
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM), proc.stderr.read()


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """`easylaunch ui --port 0` over a registry of this module's own."""
    with serving(settings_file(tmp_path_factory.mktemp("dashboard"))) as served:
        yield served


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    folder = Path(os.environ.get("EASYLAUNCH_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_until(driver, predicate, timeout: float = 15):
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(predicate)


def foreign_scripts(driver) -> int:
    """How many <script> elements the page holds besides its own files under /static/: none,
    unless some text a run wrote became markup (the CSP would keep it from running, so an
    alert proves nothing)."""
    return driver.execute_script(
        "return [...document.scripts].filter((s) => !s.getAttribute('src')"
        "  || !s.getAttribute('src').startsWith('/static/')).length")


def open_page(driver, dashboard: Dashboard, path: str) -> None:
    """Open ``path`` (the first visit brings the token, which the dashboard keeps as a
    cookie) and wait for it to be complete."""
    if not driver.get_cookies():
        driver.get(dashboard.url)
    driver.get(dashboard.base + path)
    wait_until(driver, lambda d: d.execute_script("return document.readyState") == "complete")


def test_runs_page_lists_a_sweep_and_a_run_shows_its_logs_as_text(dashboard, browser,
                                                                   artifacts):
    jobs = run_sweep(jobfns.train, [dict(learning_rate=SCRIPT, seed=1),
                                    dict(learning_rate=0.01, seed=1)],
                     exp_name="dash-sweep", config=dashboard.config)
    failed = run_experiment(jobfns.fail, exp_name="dash-fail", variant=dict(learning_rate=SCRIPT),
                            config=dashboard.config)
    command = run_command(["echo", SCRIPT], exp_name="dash-cmd", config=dashboard.config)
    for job in (*jobs, failed, command):
        job.wait(timeout=60)
    open_page(browser, dashboard, "/")
    rows = {tr.get_attribute("data-run"): tr
            for tr in browser.find_elements(By.CSS_SELECTOR, "table.runs tbody tr")}
    assert {j.id for j in (*jobs, failed)} <= set(rows)
    row = rows[jobs[0].id].text
    assert "succeeded" in row and "local" in row
    heading = rows[jobs[0].id].find_element(By.XPATH, "..").find_element(By.CSS_SELECTOR,
                                                                          "tr.group")
    assert heading.text == f"dash-sweep · sweep {sweep_of(jobs[0])[:8]} · 2 succeeded"
    assert f"learning_rate={SCRIPT}" in row  # the key that differs within the sweep, as text
    assert "seed" not in row  # (the same in both runs)
    assert "failed" in rows[failed.id].text
    assert f"$ echo {shlex.quote(SCRIPT)}" in rows[command.id].text  # the command, as text
    why = rows[failed.id].find_element(By.CSS_SELECTOR, "td.reason").get_attribute("textContent")
    assert why == f"ValueError: bad learning rate {SCRIPT}"  # why it failed, as text
    browser.save_screenshot(str(artifacts / "dashboard-runs.png"))

    open_page(browser, dashboard, f"/run/{jobs[0].id}")
    stdout = browser.find_element(By.CSS_SELECTOR, 'pre[data-log="stdout"]')
    wait_until(browser, lambda d: "logs to" in stdout.text)
    assert f"lr {SCRIPT} logs to {jobs[0].log_dir}" in stdout.text
    assert foreign_scripts(browser) == 0
    assert not browser.find_elements(By.CSS_SELECTOR, "pre script")  # text, not an element
    assert browser.find_element(By.CSS_SELECTOR, "[data-field=state]").text == "succeeded"
    assert SCRIPT in browser.find_element(By.CSS_SELECTOR, "pre.variant-json").text
    assert str(jobs[0].log_dir) in browser.find_element(By.CSS_SELECTOR, "table.facts").text

    open_page(browser, dashboard, f"/run/{failed.id}")
    stderr = browser.find_element(By.CSS_SELECTOR, 'pre[data-log="stderr"]')
    wait_until(browser, lambda d: "ValueError" in stderr.text)
    assert f"bad learning rate {SCRIPT}" in stderr.text
    assert f"bad learning rate {SCRIPT}" in browser.find_element(By.CSS_SELECTOR,
                                                                 "pre.error-text").text
    assert foreign_scripts(browser) == 0
    browser.save_screenshot(str(artifacts / "dashboard-run.png"))


def write_metrics(job, lines: list[dict]) -> None:
    """A run's metrics.jsonl, as easylaunch.log_metrics writes it."""
    (job.log_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def curve(driver, metric: str, within: str = "") -> dict:
    """What a drawn chart shows (the first of ``metric``, in the element ``within`` selects):
    its series' labels and data, its x range, whether thinned."""
    return driver.execute_script(
        "const f = document.querySelector("
        "  `${arguments[1]} figure.curve[data-metric=\"${arguments[0]}\"]`);"
        "if (!f || !f.plot) return null;"
        "const u = f.plot;"
        "return {labels: u.series.slice(1).map((s) => s.label), data: u.data,"
        "        x: [u.scales.x.min, u.scales.x.max], perPoint: f.chart.curve.per_point,"
        "        caption: f.querySelector('figcaption').textContent,"
        "        pixels: f.querySelector('canvas').toDataURL()};", metric, within)


def wait_for_curve(driver, metric: str, timeout: float = 15) -> dict:
    return wait_until(driver, lambda d: curve(d, metric), timeout)


def sweep_of(job) -> str:
    return job.launch_info["sweep_id"]


def test_a_sweeps_results_sort_and_draw_and_a_run_draws_its_metrics(dashboard, browser,
                                                                     artifacts):
    variants = [dict(learning_rate=lr, seed=seed) for lr in (0.1, 0.01) for seed in (0, 1)]
    jobs = run_sweep(jobfns.train, variants, exp_name="dash-results", config=dashboard.config)
    for job, v in zip(jobs, variants, strict=True):
        job.wait(timeout=60)
        write_metrics(job, [{"step": s, "time": 1.7e9 + s, "loss": v["learning_rate"] * (5 - s)
                             + v["seed"] + 1e-7, "acc": s / 4} for s in range(5)])
    open_page(browser, dashboard, f"/sweep/{sweep_of(jobs[0])}")
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("dash-results · sweep")
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table.results th")]
    assert {"run", "state", "time run", "learning_rate", "seed", "loss (result)",
            "loss (last)", "acc (last)"} <= set(headers)
    assert not {"run_id", "runtime_s", "metric.loss"} & set(headers)  # pandas' names
    column = headers.index("loss (last)")

    def losses() -> list[str]:
        return [tr.find_elements(By.TAG_NAME, "td")[column].text
                for tr in browser.find_elements(By.CSS_SELECTOR, "table.results tbody tr")]

    assert sorted(losses()) == ["0.01", "0.1", "1.01", "1.1"]  # last values, 4 digits shown
    cell = browser.find_element(By.CSS_SELECTOR, "table.results tbody td[title^='0.0100']")
    assert cell.get_attribute("title") == repr(0.01 + 1e-7)  # the whole value on hover
    browser.find_elements(By.CSS_SELECTOR, "table.results th")[column].click()
    assert losses() == ["0.01", "0.1", "1.01", "1.1"]
    browser.find_elements(By.CSS_SELECTOR, "table.results th")[column].click()
    assert losses() == ["1.1", "1.01", "0.1", "0.01"]

    drawn = wait_for_curve(browser, "loss")
    assert sorted(drawn["labels"]) == sorted(f"learning_rate={v['learning_rate']}  seed="
                                             f"{v['seed']}" for v in variants)
    assert drawn["data"][0] == [0, 1, 2, 3, 4] and drawn["perPoint"] == 1
    lines = browser.find_elements(By.CSS_SELECTOR, "svg.hparams polyline.hp-line")
    assert sorted(line.get_attribute("data-run") for line in lines) == sorted(j.id for j in jobs)
    names = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.hparams .axis-name")]
    assert names == ["learning_rate", "seed", "loss"]
    browser.save_screenshot(str(artifacts / "dashboard-sweep.png"))

    open_page(browser, dashboard, f"/run/{jobs[0].id}")
    loss, acc = wait_for_curve(browser, "loss"), wait_for_curve(browser, "acc")
    assert loss["data"][0] == [0, 1, 2, 3, 4]
    assert loss["data"][1] == pytest.approx([0.5, 0.4, 0.3, 0.2, 0.1], abs=2e-7)
    assert acc["data"][1] == [0, 0.25, 0.5, 0.75, 1]
    assert "every point" in loss["caption"]
    browser.save_screenshot(str(artifacts / "dashboard-run-metrics.png"))


def test_states_logs_and_charts_follow_runs_without_reloading(dashboard, browser):
    # (each run ends when the test lets it: a loaded machine cannot outrun the page)
    short, long = run_sweep(jobfns.print_slowly, [dict(lines=5, hold=True),
                                                  dict(lines=40, hold=True)],
                            exp_name="dash-follow", config=dashboard.config)
    assert wait_for(lambda: long.status() is JobState.RUNNING)
    open_page(browser, dashboard, "/?exp=dash-follow")
    browser.execute_script("document.body.dataset.loadedOnce = '1'")  # gone if it reloads
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{short.id}"]')
    assert row.get_attribute("data-open") == "1"
    state = row.find_element(By.CSS_SELECTOR, "[data-field=state]")
    (short.log_dir / jobfns.RELEASE).touch()
    wait_until(browser, lambda d: state.text == "succeeded")
    assert browser.execute_script("return document.body.dataset.loadedOnce") == "1"

    assert long.status() is JobState.RUNNING
    open_page(browser, dashboard, f"/run/{long.id}")
    browser.execute_script("document.body.dataset.loadedOnce = '1'")
    assert not browser.find_elements(By.CSS_SELECTOR, "figure.curve")
    write_metrics(long, [{"step": s, "loss": 1 / (s + 1)} for s in range(3)])
    assert wait_for_curve(browser, "loss")["data"][0] == [0, 1, 2]
    stdout = browser.find_element(By.CSS_SELECTOR, 'pre[data-log="stdout"]')
    wait_until(browser, lambda d: "line 39" in stdout.text)
    assert stdout.text.splitlines() == [f"line {i}" for i in range(40)]
    state = browser.find_element(By.CSS_SELECTOR, "[data-field=state]")
    assert state.text == "running"
    (long.log_dir / jobfns.RELEASE).touch()
    wait_until(browser, lambda d: state.text == "succeeded")
    assert browser.execute_script("return document.body.dataset.loadedOnce") == "1"


def test_cancel_and_resubmit_from_the_run_page(dashboard, browser):
    job = run_experiment(jobfns.sleep_with_child, exp_name="dash-cancel",
                         config=dashboard.config)
    pids = run_pids(job.log_dir)
    open_page(browser, dashboard, f"/run/{job.id}")
    browser.find_element(By.CSS_SELECTOR, 'button[data-action="cancel"]').click()
    browser.switch_to.alert.accept()
    state = browser.find_element(By.CSS_SELECTOR, "[data-field=state]")
    wait_until(browser, lambda d: state.text == "cancelled", timeout=30)
    assert job.wait(timeout=30) is JobState.CANCELLED
    assert wait_for(lambda: not any(alive(p) for p in pids))

    done = run_experiment(jobfns.train, exp_name="dash-again", variant=dict(learning_rate=3),
                          config=dashboard.config)
    done.wait(timeout=60)
    open_page(browser, dashboard, f"/run/{done.id}")
    browser.find_element(By.CSS_SELECTOR, 'button[data-action="resubmit"]').click()
    browser.switch_to.alert.accept()
    wait_until(browser, lambda d: "/run/" in d.current_url and done.id not in d.current_url)
    state = browser.find_element(By.CSS_SELECTOR, "[data-field=state]")
    wait_until(browser, lambda d: state.text == "succeeded", timeout=30)
    assert "resubmitted from" in browser.find_element(By.CSS_SELECTOR, "table.facts").text


def test_actions_need_the_token_and_the_dashboards_own_origin(dashboard):
    job = run_experiment(jobfns.sleep_with_child, exp_name="dash-guard",
                         config=dashboard.config)
    run_pids(job.log_dir)
    cancel = f"/api/runs/{job.id}/cancel"
    token = {"X-EasyLaunch-Token": dashboard.token}
    with dashboard.client() as client, httpx.Client(base_url=dashboard.base) as stranger:
        assert stranger.get("/").status_code == 403  # no token, no page
        assert stranger.post(cancel, headers=token).status_code == 403
        assert client.post(cancel).status_code == 403  # the cookie alone
        assert client.post(cancel, headers={"X-EasyLaunch-Token": "guess"}).status_code == 403
        assert client.post(cancel, headers={**token, "Origin": "http://evil.example"}
                           ).status_code == 403
        assert client.post(cancel, headers={**token, "Sec-Fetch-Site": "cross-site"}
                           ).status_code == 403
        assert client.get(cancel).status_code == 405  # GET never acts
        rebound = client.get("/", headers={"Host": f"evil.example:{dashboard.port}"})
        assert rebound.status_code == 400  # DNS rebinding: a name that is not ours
        assert job.status() is JobState.RUNNING  # none of that changed anything
        page = client.get("/")
        assert page.status_code == 200
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        answer = client.post(cancel, headers={**token, "Origin": dashboard.base})
        assert answer.status_code == 200 and answer.json() == {"state": "cancelled"}
    assert job.status() is JobState.CANCELLED


def test_listening_beyond_loopback_needs_allow_remote(tmp_path):
    config = settings_file(tmp_path)
    proc = ui(config, "--host", "0.0.0.0", "--port", "0")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and out == ""
    assert "not a loopback address" in err and "--allow-remote" in err and "Traceback" not in err
    proc = ui(config, "--host", "0.0.0.0", "--port", "0", "--allow-remote")
    try:
        assert "?token=" in proc.stdout.readline()
    finally:
        proc.terminate()
    assert "warning: listening on 0.0.0.0, not loopback" in proc.communicate(timeout=30)[1]


def test_a_log_is_read_from_its_end_then_on_in_whole_lines(tmp_path):
    log = tmp_path / "stdout.log"
    lines = [f"line {i} é\n" for i in range(20_000)]
    log.write_text("".join(lines))
    text, offset = views.read_log(log, -1)  # the end, from the start of a line
    assert text.startswith("line ") and lines[-1] in text
    assert len(text.encode()) <= views.LOG_TAIL_BYTES and offset == log.stat().st_size
    with log.open("a") as f:
        f.write("more\nhalf")
    assert views.read_log(log, offset) == ("more\nhalf", offset + 9)
    whole, stop = views.read_log(log, 0)  # a read that stops short ends with a whole line
    assert len(whole.encode()) <= views.LOG_CHUNK_BYTES and whole.endswith("é\n")
    assert stop == len(whole.encode())
    log.write_text("new\n")  # (the file started again)
    assert views.read_log(log, offset) == ("new\n", 4)


def test_pages_hold_the_runs_a_filter_selects(tmp_path):
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.add(dict(id=f"{i:08x}", exp_name=f"exp-{i % 3}", mode="local",
                      state=("succeeded", "failed")[i % 2], log_dir=str(tmp_path / f"r{i}"),
                      variant={"lr": i, "seed": 0}, created=1e9 + i, sweep="s")
                 for i in range(120))
    groups, total = views.runs_page(registry, views.Filters(), 3)
    assert len(groups) == 1 and groups[0].counts == "60 succeeded, 60 failed"  # the sweep's
    rows = groups[0].rows
    assert total == 120 and [r.id for r in rows] == [f"{i:08x}" for i in range(19, -1, -1)]
    assert rows[0].variant == "lr=19"  # (seed is the same in every run of the sweep)
    groups, total = views.runs_page(registry, views.Filters.of({"exp": "exp-1",
                                                               "state": "failed"}), 1)
    assert total == 20 and {r.exp_name for g in groups for r in g.rows} == {"exp-1"}
    with pytest.raises(EasyLaunchError, match="a page number"):
        views.page_number("0")
    with pytest.raises(EasyLaunchError, match="states are"):
        views.Filters.of({"state": "done"}).query()
    with pytest.raises(EasyLaunchError, match="^since 'yesterday': use an age like 30m"):
        views.Filters.of({"since": "yesterday"}).query()
    with pytest.raises(argparse.ArgumentTypeError, match="^--since 'yesterday': use an"):
        parse_since("yesterday")  # (the same words, for the command line)


def test_a_log_box_keeps_its_last_megabyte_and_starts_again_when_the_file_shrinks(dashboard,
                                                                                   browser):
    job = run_experiment(jobfns.sleep_with_child, exp_name="dash-long-log",
                         config=dashboard.config)
    run_pids(job.log_dir)
    try:
        open_page(browser, dashboard, f"/run/{job.id}")
        note = browser.find_element(By.CSS_SELECTOR, '[data-note="stdout"]')
        wait_until(browser, lambda d: note.text == "(following)")
        lines = [f"row {i:07d} {'x' * 80}\n" for i in range(20_000)]  # 1.8 MB
        with job.stdout_path.open("a") as f:
            f.write("".join(lines))
        shown = "return document.querySelector('pre[data-log=stdout]').textContent"
        wait_until(browser, lambda d: d.execute_script(shown).endswith(lines[-1]), timeout=30)
        text = browser.execute_script(shown)
        assert len(text) <= 1 << 20 and text.startswith("row ")  # whole lines dropped from the top
        assert lines[0] not in text and text == "".join(lines[-len(text.splitlines()):])
        job.stdout_path.write_text("started again\n")  # (shorter than what was read)
        wait_until(browser, lambda d: d.execute_script(shown) == "started again\n")
    finally:
        job.cancel()


def test_the_token_visit_leaves_a_strict_cookie_and_an_address_without_it(dashboard):
    with httpx.Client(base_url=dashboard.base) as client:
        answer = client.get(f"/run/x?stream=a&token={dashboard.token}")
        assert answer.status_code == 303 and answer.headers["location"] == "/run/x?stream=a"
        cookie = answer.headers["set-cookie"].lower()
        assert f"easylaunch-ui-{dashboard.port}={dashboard.token.lower()}" in cookie
        assert "httponly" in cookie and "samesite=strict" in cookie
        for path, there in [("//evil.example/", "/evil.example/"),
                            ("///evil.example/x", "/evil.example/x"),
                            ("/\\evil.example/", "/%5Cevil.example/")]:  # (escaped: no slash)
            answer = client.get(httpx.URL(f"{dashboard.base}{path}?token={dashboard.token}"))
            assert answer.status_code == 303 and answer.headers["location"] == there
        for each in (answer, client.get("/"), dashboard.client().get("/")):  # 303, 403, 200
            assert each.headers["referrer-policy"] == "no-referrer"
            assert each.headers["cache-control"] == "no-store"


def test_another_loopback_address_is_a_host_it_answers_to(tmp_path):
    proc = ui(settings_file(tmp_path), "--host", "127.0.0.2", "--port", "0")
    try:
        url = proc.stdout.readline().split()[2]
        assert url.startswith("http://127.0.0.2:")
        with httpx.Client(follow_redirects=True) as client:
            assert client.get(url).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_odd_input_is_answered_without_a_crash(dashboard, tmp_path):
    job = run_experiment(jobfns.train, exp_name="dash-odd", config=dashboard.config)
    job.wait(timeout=60)
    write_metrics(job, [{"step": 0, "huge": 1e308}, {"step": 1, "huge": -1e308},
                        {"step": 0, "loss": 1.0}])
    with dashboard.client() as client:
        assert client.get("/?page=99999999999999999999").status_code == 200
        page = client.get(f"/run/{job.id}")
        assert page.status_code == 200 and 'data-log="stdout"' in page.text
        drawn = client.get(f"/api/curves?runs={job.id}&metrics=*").json()
        assert drawn["metrics"] == ["huge", "loss"]
        assert drawn["curves"]["huge"]["ys"] == [[1e308, -1e308]]
        for query, said in ((f"runs={job.id}&lo=abc&hi=1", "lo 'abc': a number"),
                            (f"runs={job.id}&lo=nan&hi=1", "lo 'nan': a number"),
                            ("runs=", "no run to draw"), ("sweep=nosuch", "no sweep id"),
                            (f"search={sweep_of(job)}", "is no search")):
            answer = client.get(f"/api/curves?{query}")
            assert answer.status_code in (400, 404) and said in answer.json()["error"]


def test_a_crash_is_answered_with_the_security_headers(tmp_path, monkeypatch):
    from easylaunch.dashboard.app import create_app

    def crash(*args):
        raise RuntimeError("a bug")

    async def get(path: str) -> httpx.Response:
        app = create_app(settings_file(tmp_path), "t", 1, None)
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:1",
                                     cookies={"easylaunch-ui-1": "t"}) as client:
            return await client.get(path)

    monkeypatch.setattr(views, "run_view", crash)
    answer = asyncio.run(get("/run/x"))
    assert answer.status_code == 500 and "RuntimeError: a bug" in answer.text
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert answer.headers["cache-control"] == "no-store"


def test_curves_are_thinned_for_a_first_draw_and_whole_when_zoomed():
    steps = list(range(100_000))
    one = (steps, [float(s % 1000) for s in steps])
    other = ([s * 10.0 for s in range(100)], [1.0] * 100)
    first = align([one, None, other], buckets=400)
    assert len(first.x) <= 400 and first.per_point > 100  # means of spans of steps
    assert first.x[0] < 200 and first.x[-1] > 99_800 and first.ys[1] == [None] * len(first.x)
    assert all(v is None or 0 <= v <= 999 for v in first.ys[0])
    zoomed = align([one, None], lo=5000, hi=5100, buckets=400)
    assert zoomed.per_point == 1  # every point in range, and one on either side
    assert zoomed.x[0] == 4999 and zoomed.x[-1] == 5101
    assert zoomed.ys[0][1:-1] == [float(s % 1000) for s in range(5000, 5101)]
    wide = align([([0, 1, 2], [1e308, -1e308, math.nan])])
    assert wide.ys == [[1e308, -1e308, None]]  # (NaN: a gap)
    repeated = align([([0, 1, 1, 2], [5.0, 6.0, 7.0, 8.0])])
    assert repeated.x == [0, 1, 2] and repeated.ys == [[5.0, 7.0, 8.0]]  # the last written


def test_metrics_are_read_alike_however_a_metrics_jsonl_is_written(tmp_path):
    lines = ['{"loss": 1, "x": null}', '{"step": 5, "loss": 2, "flag": true}',
             '{"step": null, "x": 3}', '{"loss": 4']  # (the last: being written)
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    quick = read_series(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("\n".join([*lines[:3], "not json", lines[3]]))
    slow = read_series(tmp_path)  # (line by line: one line does not read)
    expected = {"loss": ([0.0, 5.0], [1.0, 2.0]), "x": ([0.0, 2.0], [math.nan, 3.0]),
                "flag": ([5.0], [1.0])}
    for found in (quick, slow):
        assert found.keys() == expected.keys()
        for name, (steps, values) in expected.items():
            assert found[name][0] == steps and str(found[name][1]) == str(values)


def test_parallel_coordinates_have_a_line_per_run_and_say_its_values():
    runs = [("a", {"lr": 0.1, "opt": "adam"}, 0.5), ("b", {"lr": 0.001, "opt": "sgd"}, 0.1),
            ("c", {"lr": 0.01, "opt": SCRIPT}, None), ("d", {"lr": 1, "opt": "sgd"}, 0.01)]
    drawn = hparams.parallel(runs, ["lr", "opt"], "loss", apart={"d": "failed"})
    assert [a.name for a in drawn.axes] == ["lr", "opt", "loss"]
    assert [line.run_id for line in drawn.lines] == ["a", "b", "c", "d"]
    assert len(drawn.lines[2].points.split()) == 2  # no loss: its line stops at opt
    assert drawn.lines[2].colour == hparams.colour(None)
    assert drawn.lines[0].title == "a: lr=0.1  opt=adam  loss=0.5"
    assert [label for _, label in drawn.axes[0].ticks] == ["0.001", "0.01", "0.1", "1"]  # log
    # the run that failed: placed on the axes, grey, and outside the colour scale, which
    # spans the others' values (its loss, the lowest, would have made it the bluest)
    assert drawn.lines[3].apart and drawn.apart == 1
    assert drawn.lines[3].colour == hparams.colour(None)
    assert drawn.lines[3].title == "d (failed): lr=1  opt=sgd  loss=0.01"
    assert (drawn.lines[1].colour, drawn.lines[0].colour) == (hparams.colour(0.0),
                                                              hparams.colour(1.0))


def test_a_log_without_newlines_shows_its_end(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text("start\n" + "".join(f"\r{i:6d} it" for i in range(20_000)))  # a progress bar
    text, offset = views.read_log(log, -1)
    assert text.endswith(" 19999 it") and offset == log.stat().st_size
    assert text.startswith(" ") and len(text) <= views.LOG_TAIL_BYTES
    log.write_text("é" * 50_000)  # one line, cut inside a character
    text, offset = views.read_log(log, -1)
    assert text == "é" * (len(text)) and len(text) >= views.LOG_TAIL_BYTES // 2 - 1


def test_a_sweep_is_named_by_an_unambiguous_start(tmp_path):
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.add(dict(id=f"run{i}", exp_name="e", mode="local", state="succeeded",
                      log_dir=str(tmp_path / str(i)), variant={}, created=1e9 + i, sweep=sweep)
                 for i, sweep in enumerate(["feed0001", "feed0001", "feed0002"]))
    assert registry.find_sweep("feed0001") == "feed0001"
    assert registry.find_sweep("feed0002") == "feed0002"
    with pytest.raises(NoSuchRun, match="'feed' matches several sweeps: feed0002, feed0001"):
        registry.find_sweep("feed")
    with pytest.raises(NoSuchRun, match="no sweep id is or starts with 'beef'"):
        registry.find_sweep("beef")


def test_a_damaged_variant_json_shows_the_registrys_variant(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "variant.json").write_text('{"lr": ')
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.add([dict(id="abcd1234", exp_name="e", mode="local", state="succeeded",
                       log_dir=str(folder), variant={"lr": 0.1}, created=1e9)])
    assert json.loads(views.run_view(registry, "abcd1234").variant) == {"lr": 0.1}


def test_a_log_read_asks_the_runs_state_once(tmp_path, monkeypatch):
    config = settings_file(tmp_path)
    job = run_experiment(jobfns.train, exp_name="dash-once", config=config)
    job.wait(timeout=60)
    asked = []
    status = Job.status
    monkeypatch.setattr(Job, "status", lambda self: asked.append(1) or status(self))
    chunk = views.log_chunk(Registry(tmp_path / "registry.sqlite3"), job.id, "stdout", 0)
    assert "logs to" in chunk.text and not chunk.open and len(asked) == 1


def long_sweep(dashboard, exp_name: str, rates: list, steps: int = 2000,
               names: list | None = None) -> list:
    """A finished sweep whose runs logged ``steps`` steps of a loss falling at their rate
    (and were given ``names``, if any)."""
    variants = [dict(learning_rate=lr, **({"name": names[i]} if names else {}))
                for i, lr in enumerate(rates)]
    jobs = run_sweep(jobfns.train, variants, exp_name=exp_name, config=dashboard.config)
    for job, lr in zip(jobs, rates, strict=True):
        job.wait(timeout=60)
        write_metrics(job, [{"step": s, "loss": 1 / (1 + lr * s) + (s % 7) * 0.01}
                            for s in range(steps)])
    return jobs


def test_curves_hover_zoom_log_and_smooth(dashboard, browser, artifacts):
    jobs = long_sweep(dashboard, "dash-interact", [0.1, 0.01, 0.001],
                      names=["a", "b", SCRIPT])
    open_page(browser, dashboard, f"/sweep/{sweep_of(jobs[0])}")
    first = wait_for_curve(browser, "loss")
    assert first["perPoint"] == 5 and len(first["data"][0]) == 400  # thinned for a first draw
    assert f"learning_rate=0.001  name={SCRIPT}" in first["labels"]
    legend = browser.find_element(By.CSS_SELECTOR, "figure.curve .u-legend")
    assert f"name={SCRIPT}" in legend.text and foreign_scripts(browser) == 0
    titles = [t.get_attribute("textContent")
              for t in browser.find_elements(By.CSS_SELECTOR, "svg.hparams title")]
    assert any(f"name={SCRIPT}" in t for t in titles)  # the hover text, as text
    assert not legend.find_elements(By.TAG_NAME, "script")

    over = browser.find_element(By.CSS_SELECTOR, "figure.curve .u-over")
    values = "figure.curve .u-legend .u-series .u-value"
    assert {v.text for v in browser.find_elements(By.CSS_SELECTOR, values)} == {"--"}
    ActionChains(browser).move_to_element_with_offset(over, 40, 20).perform()
    shown = [v.text for v in browser.find_elements(By.CSS_SELECTOR, values)]
    assert shown[0] != "--" and float(shown[1]) > 0  # the step, then each run's value there

    width = over.size["width"]
    ActionChains(browser).move_to_element_with_offset(over, -width // 2 + 20, 0) \
        .click_and_hold().move_by_offset(40, 0).release().perform()
    zoomed = wait_until(browser, lambda d: (c := curve(d, "loss"))["perPoint"] == 1 and c)
    assert 0 < zoomed["x"][0] < zoomed["x"][1] < 200  # a range near the start
    assert zoomed["data"][0] == list(range(int(zoomed["data"][0][0]),
                                           int(zoomed["data"][0][-1]) + 1))  # every step
    assert zoomed["pixels"] != first["pixels"]
    browser.save_screenshot(str(artifacts / "dashboard-zoomed.png"))
    ActionChains(browser).double_click(over).perform()
    back = wait_until(browser, lambda d: (c := curve(d, "loss"))["perPoint"] == 5 and c)
    assert back["x"] == first["x"]

    browser.find_element(By.CSS_SELECTOR, "[data-control=log]").click()
    logged = wait_until(browser, lambda d: "log axis" in curve(d, "loss")["caption"] and
                        curve(d, "loss"))
    assert logged["pixels"] != back["pixels"]
    browser.find_element(By.CSS_SELECTOR, "[data-control=log]").click()
    smoothing = browser.find_element(By.CSS_SELECTOR, "[data-control=smoothing]")
    browser.execute_script("arguments[0].value = '0.9';"
                           "arguments[0].dispatchEvent(new Event('input'))", smoothing)
    smoothed = curve(browser, "loss")
    raw, drawn = back["data"][1], smoothed["data"][1]
    assert drawn[0] == raw[0] and drawn[5] != raw[5]  # (debiased: the first point stays)
    wiggle = [sum(abs(b - a) for a, b in itertools.pairwise(ys[200:300]))
              for ys in (raw, drawn)]
    assert wiggle[1] < wiggle[0] / 3  # the wiggle is smoothed out
    browser.save_screenshot(str(artifacts / "dashboard-smoothed.png"))


def test_runs_picked_on_two_sweeps_are_overlaid(dashboard, browser, artifacts):
    one = long_sweep(dashboard, "dash-pick-a", [0.1, 0.2], steps=50)
    other = long_sweep(dashboard, "dash-pick-b", [0.3, 0.4], steps=50)
    open_page(browser, dashboard, "/")
    browser.execute_script("localStorage.clear()")
    for job in (one[0], other[1]):
        open_page(browser, dashboard, f"/sweep/{sweep_of(job)}")
        browser.find_element(By.CSS_SELECTOR, f'input[data-pick="{job.id}"]').click()
    link = browser.find_element(By.CSS_SELECTOR, "a[data-compare]")
    assert link.text == "compare (2)"
    link.click()
    drawn = wait_for_curve(browser, "loss")
    assert sorted(drawn["labels"]) == ["dash-pick-a · learning_rate=0.1",
                                       "dash-pick-b · learning_rate=0.4"]
    assert len(drawn["data"]) == 3 and drawn["data"][0] == list(range(50))
    rows = browser.find_elements(By.CSS_SELECTOR, "table.runs tr[data-run]")
    assert {r.get_attribute("data-run") for r in rows} == {one[0].id, other[1].id}
    browser.save_screenshot(str(artifacts / "dashboard-compare.png"))


def test_a_sweep_page_follows_its_runs_without_reloading(dashboard, browser):
    jobs = run_sweep(jobfns.print_slowly, [dict(lines=3), dict(lines=30, hold=True)],
                     exp_name="dash-live", config=dashboard.config)
    assert wait_for(lambda: jobs[1].status() is JobState.RUNNING)
    open_page(browser, dashboard, f"/sweep/{sweep_of(jobs[0])}")
    browser.execute_script("document.body.dataset.loadedOnce = '1'")
    counts = browser.find_element(By.CSS_SELECTOR, "[data-counts]")
    assert "running" in counts.text
    write_metrics(jobs[1], [{"step": s, "loss": 1 / (s + 1)} for s in range(3)])
    assert wait_for_curve(browser, "loss")["data"][0] == [0, 1, 2]
    write_metrics(jobs[1], [{"step": s, "loss": 1 / (s + 1)} for s in range(6)])
    wait_until(browser, lambda d: curve(d, "loss")["data"][0] == [0, 1, 2, 3, 4, 5])
    (jobs[1].log_dir / jobfns.RELEASE).touch()
    wait_until(browser, lambda d: counts.text == "2 succeeded", timeout=60)
    state = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{jobs[1].id}"] '
                                                  '[data-field=state]')
    assert state.text == "succeeded"
    assert browser.execute_script("return document.body.dataset.loadedOnce") == "1"


def test_why_runs_failed_is_listed_and_filters_them(dashboard, browser):
    failed = run_sweep(jobfns.fail, [dict(learning_rate=r) for r in (1, 2)],
                       exp_name="dash-why", config=dashboard.config)
    fine = run_experiment(jobfns.train, exp_name="dash-why", variant=dict(learning_rate=3),
                          config=dashboard.config)
    for job in (*failed, fine):
        job.wait(timeout=60)
    open_page(browser, dashboard, "/?exp=dash-why")
    browser.find_element(By.CSS_SELECTOR, "details.reasons summary").click()
    reason = browser.find_element(By.CSS_SELECTOR, 'a[data-reason="ValueError: bad learning '
                                                   'rate 1"]')
    assert reason.text == "1 ValueError: bad learning rate 1"
    reason.click()
    rows = browser.find_elements(By.CSS_SELECTOR, "table.runs tr[data-run]")
    assert [r.get_attribute("data-run") for r in rows] == [failed[0].id]

    open_page(browser, dashboard, f"/sweep/{sweep_of(failed[0])}")
    buttons = browser.find_elements(By.CSS_SELECTOR, "[data-filter-reason]")
    assert sorted(b.text for b in buttons) == [f"1 ValueError: bad learning rate {r}"
                                               for r in (1, 2)]
    buttons[0].click()
    shown = [r for r in browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")
             if r.is_displayed()]
    assert len(shown) == 1 and buttons[0].get_attribute("data-filter-reason") in shown[0].text


def test_a_sweep_with_failed_runs_is_counted_honestly(dashboard, browser, artifacts):
    """Runs that failed are drawn apart (dashed curves, grey in the hyperparameter view), the
    runs that did not fail are counted under their state, alike runs keep names of their own,
    and compare counts the runs its URL names."""
    variants = [dict(lr=0.1, steps=4), dict(lr=0.1, steps=4), dict(lr=0.2, steps=4),
                dict(lr=0.3, steps=4, fail_at=2)]
    jobs = run_sweep(jobfns.log_curve, variants, exp_name="dash-honest", config=dashboard.config)
    assert [j.wait(timeout=60) for j in jobs] == [JobState.SUCCEEDED] * 3 + [JobState.FAILED]
    failed = jobs[3].id
    open_page(browser, dashboard, f"/sweep/{sweep_of(jobs[0])}")
    assert not re.search(r"\bnan\b", browser.find_element(By.TAG_NAME, "body").text, re.I)
    buttons = browser.find_elements(By.CSS_SELECTOR, "[data-filter-reason]")
    assert [b.text for b in buttons] == ["3 succeeded", "1 RuntimeError: diverged at step 2"]
    buttons[0].click()
    shown = [r.get_attribute("data-run") for r in browser.find_elements(
        By.CSS_SELECTOR, "#results tbody tr") if r.is_displayed()]
    assert sorted(shown) == sorted(j.id for j in jobs[:3])

    drawn = wait_for_curve(browser, "loss")
    labels = dict(zip(drawn["labels"], browser.execute_script(
        "return document.querySelector('figure.curve').plot.series.slice(1)"
        "  .map((s) => (s.dash || []).length > 0)"), strict=True))
    assert labels == {f"lr=0.1 · {jobs[0].id}": False, f"lr=0.1 · {jobs[1].id}": False,
                      "lr=0.2": False, "lr=0.3  fail_at=2 (failed)": True}  # dashed: apart
    assert "dashed: 1 that failed" in drawn["caption"]

    line = browser.find_element(By.CSS_SELECTOR, f'svg.hparams polyline[data-run="{failed}"]')
    assert "hp-apart" in line.get_attribute("class")
    assert line.get_attribute("stroke") == hparams.colour(None)  # grey, not on the scale
    assert line.find_element(By.TAG_NAME, "title").get_attribute("textContent").startswith(
        f"{failed} (failed): ")
    others = {browser.find_element(By.CSS_SELECTOR, f'svg.hparams polyline[data-run="{j.id}"]')
              .get_attribute("stroke") for j in jobs[:3]}
    assert hparams.colour(None) not in others and hparams.colour(1.0) in others  # the worst
    legend = browser.find_element(By.CSS_SELECTOR, "[data-hp-apart]").text
    assert "1 run that failed, timed out or was cancelled, not in the colours" in legend
    browser.save_screenshot(str(artifacts / "dashboard-sweep-failed.png"))

    browser.execute_script("localStorage.clear()")
    open_page(browser, dashboard, f"/compare?runs={jobs[0].id},{failed}")
    assert browser.find_element(By.CSS_SELECTOR, "a[data-compare]").text == "compare (2)"
    picked = browser.find_elements(By.CSS_SELECTOR, "input[data-pick]")
    assert {box.get_attribute("data-pick") for box in picked if box.is_selected()} == {
        jobs[0].id, failed}


def test_a_search_shows_its_trials_the_best_and_the_objective_while_it_runs(dashboard,
                                                                            browser, artifacts):
    """A search's sweep page: its trials by state (pruned apart from failed), the best, a row
    per trial with why it ended, the objective over trials, each trial's curve; followed
    without a reload while the (detached) search runs."""
    space = {"x": optuna.distributions.FloatDistribution(-1.0, 1.0), "opt": ["adam", SCRIPT],
             "steps": 30, "step_s": 0.1}
    search = run_search(searchfns.curve, space, "loss", n_trials=6, max_parallel=3,
                        min_resource=2, seed=1, exp_name="dash-search", detach=True,
                        config=dashboard.config)
    assert wait_for(lambda: any(t["runs"] for t in search.summary()["trials"]))
    open_page(browser, dashboard, f"/sweep/{search.id}")
    browser.execute_script("document.body.dataset.loadedOnce = '1'")
    assert browser.find_elements(By.CSS_SELECTOR, "[data-follow][data-open]")  # it goes on
    wait_until(browser, lambda d: d.execute_script(  # (in one step: the part is replaced)
        "return document.querySelector('.search p.count').textContent")
        .startswith("6/6 trials finished"), timeout=60)
    assert browser.execute_script("return document.body.dataset.loadedOnce") == "1"
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-follow][data-open]")

    summary = search.summary()
    chips = {c.get_attribute("data-count"): c.text
             for c in browser.find_elements(By.CSS_SELECTOR, "[data-count]")}
    assert chips == {state: f"{n} {state}" for state, n in summary["counts"].items()}
    assert "pruned" in chips and summary["counts"]["complete"] > 0
    best = search.best
    shown = browser.find_element(By.CSS_SELECTOR, "[data-best]")
    assert shown.text.startswith(f"best loss {best.value:.4g}: trial {best.number}, run "
                                 f"{best.job.id}")
    assert shown.find_element(By.TAG_NAME, "a").get_attribute("href").endswith(
        f"/run/{best.job.id}")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.trials tbody tr")
    assert [r.get_attribute("data-trial") for r in rows] == [str(i) for i in range(6)]
    for row, trial in zip(rows, summary["trials"], strict=True):
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[1].text == trial["state"]
        assert cells[-1].get_attribute("textContent") == (trial["reason"] or "")
        assert cells[4].text == Path(trial["runs"][-1]).name.rsplit("_", 1)[1]
        assert f"opt={trial['variant']['opt']}" in cells[5].get_attribute("textContent")
    assert any(t["variant"]["opt"] == SCRIPT for t in summary["trials"])  # shown as text:
    assert foreign_scripts(browser) == 0

    complete = [t["value"] if t["state"] == "complete" else None for t in summary["trials"]]
    objective = wait_until(browser, lambda d: (c := curve(d, "loss", "[data-search]"))
                           and c["data"][2] == complete and c)  # (followed: the last trials)
    assert objective["data"][0] == list(range(6)) and objective["data"][1][-1] == best.value
    assert objective["labels"] == ["best so far", "complete trials' loss",
                                   "pruned trials' loss where stopped"]
    assert objective["caption"].startswith("loss · 6 of 6 trials")
    # (None while the sweep's chart is drawn again: not yet)
    assert wait_until(browser, lambda d: len(
        (curve(d, "loss", "[data-sweep]") or {"labels": []})["labels"]) == 6)
    # (each trial's run, its loss per step: those that started after the page opened too)
    browser.save_screenshot(str(artifacts / "dashboard-search.png"))


def test_a_search_view_counts_trials_and_follows_the_best_either_way(tmp_path):
    """A maximized search, still running: its states in a fixed order, the best so far rising
    over complete trials only, a NaN a pruned trial reported left out, runs by their ids."""
    registry = Registry(tmp_path / "registry.sqlite3")
    folders = [tmp_path / "logs" / "exp" / f"run{i}" for i in range(5)]
    registry.add(dict(id=f"id{i}", exp_name="exp", mode="local", state="succeeded",
                      log_dir=str(folder), variant={}, created=1e9 + i, sweep="s1")
                 for i, folder in enumerate(folders))
    trials = [(0, "complete", 0.5, None), (1, "pruned", math.nan, "pruned at step 2: ..."),
              (2, "complete", 0.9, None), (3, "fail", None, "ValueError: diverged"),
              (4, "running", None, None)]
    summary = {"id": "s1", "n_trials": 8, "objective": "acc", "direction": "maximize",
               "finished": 4,
               "counts": {"complete": 2, "pruned": 1, "fail": 1, "running": 1},
               "trials": [{"number": n, "state": state, "value": value,
                           "variant": {"lr": 10.0 ** -n, "seed": 0}, "runs": [str(folders[n])],
                           "reason": reason, "last_step": 3} for n, state, value, reason
                          in trials]}
    summary["best"] = summary["trials"][2]
    (tmp_path / "logs" / ".searches" / "s1").mkdir(parents=True)
    (tmp_path / "logs" / ".searches" / "s1" / "summary.json").write_text(json.dumps(summary))

    view = searches.search_view(registry, "s1")
    assert view is not None and view.open  # (4 of 8 finished)
    assert view.counts == [("running", 1), ("complete", 2), ("pruned", 1), ("fail", 1)]
    assert view.best is not None and view.best.runs == ["id2"] and view.best.value_text == "0.9"
    assert [t.variant for t in view.trials[:2]] == ["lr=1", "lr=0.1"]  # (seed: the same)
    drawn = searches.objective_curves(view)
    json.dumps(drawn, allow_nan=False)  # (as the page is sent it)
    assert drawn["curves"]["acc"]["ys"] == [[0.5, 0.5, 0.9, 0.9, 0.9],  # the best so far
                                            [0.5, None, 0.9, None, None],
                                            [None] * 5]  # (the NaN: no point)
    assert all(run["open"] for run in drawn["runs"])
    assert searches.search_view(registry, "no-search") is None


def test_the_runs_list_shows_an_htp_runs_last_values(slurm_cfg, tmp_path):
    """An htp run writes its metrics in its job's folder on the cluster (SSS_LOG_DIR), not in
    its folder here: the runs list reads them where the sweep page and load_sweep do."""
    config = settings_file(tmp_path, SLURM_DIRECTORY_FOR_JOB_SCRIPT=str(tmp_path / "cluster"),
                           SSS_LOG_DIR=str(tmp_path / "cluster-logs"), SSS_PYTHON=sys.executable,
                           **{k: slurm_cfg[k] for k in ("SLURM_PYTHON", "SLURM_CONFIGS")})
    job, = run_sweep(jobfns.log_curve, [dict(lr=0.5, steps=3)], mode="htp",
                     exp_name="dash-htp", config=config)
    cluster = Path(job.launch_info["backend"]["cluster_batch_dir"])
    if not (cluster / "job_ids.txt").exists():  # (a batch to copy: as its user would)
        copy_to_cluster(job)
        subprocess.run(["bash", str(cluster / "submit.sh")], check=True, capture_output=True)
    assert job.wait(timeout=180) is JobState.SUCCEEDED
    assert not (job.log_dir / "metrics.jsonl").exists()  # (written on the cluster's side)
    with serving(config) as served:
        page = served.client().get("/")
    assert page.status_code == 200
    values = re.findall(r'<span class="metric">(\w+) <b>([\d.]+)</b>', page.text)
    assert values == [("loss", "0.5"), ("acc", "0.6667")]


def test_pages_load_nothing_from_elsewhere_and_hold_at_900_px(dashboard, browser, artifacts):
    jobs = long_sweep(dashboard, "dash-narrow", [0.1, 0.2], steps=20)
    pages = {"runs": "/", "sweep": f"/sweep/{sweep_of(jobs[0])}", "run": f"/run/{jobs[0].id}",
             "compare": f"/compare?runs={jobs[0].id},{jobs[1].id}"}
    browser.set_window_size(900, 1000)
    try:
        for name, path in pages.items():
            open_page(browser, dashboard, path)
            if name != "runs":
                wait_for_curve(browser, "loss")
            loaded = browser.execute_script(
                "return performance.getEntriesByType('resource').map((e) => e.name)")
            assert loaded and all(url.startswith(dashboard.base + "/") for url in loaded), loaded
            width, room = browser.execute_script(
                "return [document.documentElement.scrollWidth, "
                "document.documentElement.clientWidth]")
            assert width <= room, f"{name}: {width} px wide in a {room} px window"
            browser.save_screenshot(str(artifacts / f"dashboard-{name}-900px.png"))
    finally:
        browser.set_window_size(1400, 1000)


def test_the_token_outlives_a_restart_of_the_dashboard(tmp_path):
    config = settings_file(tmp_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])

    def start(*args: str) -> tuple[subprocess.Popen, str]:
        proc = ui(config, "--port", port, *args)
        return proc, proc.stdout.readline().split()[2]

    def stop(proc: subprocess.Popen) -> None:
        proc.terminate()
        proc.wait(timeout=30)

    proc, url = start()
    stop(proc)
    token_file = tmp_path / "ui-token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    proc, again = start()
    try:
        assert again == url
        client = httpx.Client(base_url=url.split("/?")[0], timeout=30)
        client.cookies.set(f"easylaunch-ui-{port}", url.rsplit("token=", 1)[1])
        assert client.get("/").status_code == 200  # the open tab's cookie still works
    finally:
        stop(proc)
    proc, renewed = start("--new-token")
    try:
        assert renewed != url
        assert client.get("/").status_code == 403
    finally:
        stop(proc)

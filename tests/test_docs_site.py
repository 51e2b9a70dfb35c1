"""The built documentation site in Debian's headless Chromium with every host but 127.0.0.1
cut off: each page asks nothing of another site, and the diagrams draw (Mermaid from npm,
served by the site itself)."""

import functools
import json
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import REPO_DIR
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait
from test_dashboard import CHROME_FLAGS, CHROMEDRIVER, CHROMIUM

from easylaunch import __version__

PAGES = ["", "getting-started/", "guides/pools/", "troubleshooting/",
         "development/architecture/", "reference/api/"]


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as ``mkdocs build`` makes it, served on 127.0.0.1: its base URL."""
    folder = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                    "--site-dir", str(folder)], cwd=REPO_DIR, check=True,
                   env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert (folder / "assets/vendor/mermaid.min.js").exists(), \
        "no local Mermaid: run scripts/setup.sh (it copies npm's into docs/assets/vendor)"
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """Chromium that resolves no host but 127.0.0.1, logging every request it makes."""
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*CHROME_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('profile')}",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def requested(driver) -> list[str]:
    """The web URLs asked for since the last look (not the browser's own chrome:// pages)."""
    events = (json.loads(entry["message"])["message"] for entry in driver.get_log("performance"))
    return [url for e in events if e["method"] == "Network.requestWillBeSent"
            and (url := e["params"]["request"]["url"]).startswith(("http:", "https:", "ws"))]


@pytest.mark.parametrize("page", PAGES)
def test_a_page_asks_nothing_of_another_site(site, offline, page):
    requested(offline)  # (what earlier pages asked)
    offline.get(site + page)
    WebDriverWait(offline, 15).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    elsewhere = [url for url in requested(offline)
                 if not url.startswith((site, "data:", "blob:"))]
    assert elsewhere == [], elsewhere


def test_the_architecture_diagrams_draw_offline(site, offline):
    source = (REPO_DIR / "docs/development/architecture.md").read_text()
    count = source.count("```mermaid")
    assert count >= 2
    offline.get(site + "development/architecture/")
    # (Material swaps each diagram's source block for a drawn one, in a closed shadow root)
    WebDriverWait(offline, 30, poll_frequency=0.2).until(lambda d: d.execute_script(
        "return document.querySelectorAll('div.mermaid').length") == count)
    assert offline.execute_script("return document.querySelectorAll('pre.mermaid').length") == 0
    heights = offline.execute_script(
        "return [...document.querySelectorAll('div.mermaid')].map(e => e.offsetHeight)")
    assert all(h > 50 for h in heights), heights  # (drawn: a source block left is one line)


def test_the_header_names_the_version_the_site_documents(site, offline):
    offline.get(site)
    header = offline.execute_script(
        "return document.querySelector('.md-header__topic').textContent")
    assert header.split() == ["easylaunch", __version__]


def test_setup_copies_the_mermaid_material_would_fetch():
    """The same major version as Material's CDN default (a newer major may not draw)."""
    bundle = next((Path(sys.prefix) / "lib").glob(
        "python*/site-packages/material/templates/assets/javascripts/bundle.*.min.js"))
    import re

    cdn = re.search(r"unpkg\.com/mermaid@(\d+)", bundle.read_text())
    ours = (REPO_DIR / ".tools/mermaid/node_modules/mermaid/package.json")
    assert cdn and json.loads(ours.read_text())["version"].split(".")[0] == cdn[1]

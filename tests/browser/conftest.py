"""Browser tests: the app launched as a real `python -m demo` subprocess, driven by Playwright
through Debian's chromium.

Every test in this folder carries the `browser` marker (`python -m pytest -m browser` runs them
alone). One chromium serves the whole session and one app each module, because each start costs
seconds. Each test's page is screenshotted into test-artifacts/<test name>.png, pass or fail.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
APP_START_TIMEOUT_S = 90  # a cold start imports torch and gradio: seconds here, more on a loaded machine
VIEWPORT = {"width": 1400, "height": 1000}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.browser)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchedApp:
    """The app subprocess, its address and its database."""

    url: str
    db: Path
    process: subprocess.Popen
    log: Path

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _wait_until_up(app: LaunchedApp, timeout_s: float) -> None:
    """Poll /gradio_api/info until it answers, as Gradio's own end-to-end tests wait for a launch."""
    deadline = time.monotonic() + timeout_s
    while True:
        if app.process.poll() is not None:
            pytest.fail(f"the app exited with {app.process.returncode} before answering; its stderr:\n{app.log_tail()}")
        try:
            with urllib.request.urlopen(f"{app.url}gradio_api/info", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the app did not answer {app.url}gradio_api/info within {timeout_s:g} s; its stderr:\n"
                        f"{app.log_tail()}")
        time.sleep(0.25)


def _stop(process: subprocess.Popen) -> None:
    """Stop the app and anything it started (its own process group), politely first."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    try:  # children of the app (a sandboxed SQL child, say) share its group: none may outlive it
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=15)


@pytest.fixture(scope="session")
def smoke_cache(tmp_path_factory) -> Path:
    """Where the app writes the smoke model: one folder for the session, nothing in ~/.cache."""
    return tmp_path_factory.mktemp("pattrieval-cache")


@pytest.fixture(scope="module")
def launch_app(tmp_path_factory, smoke_cache):
    """A function db -> LaunchedApp that starts `python -m demo --db db --port P`; all stopped at the end."""
    started: list[LaunchedApp] = []

    def launch(db: Path) -> LaunchedApp:
        port = _free_port()
        log = tmp_path_factory.mktemp("app-log") / "stderr.log"
        env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "PATTRIEVAL_DB")}
        # An empty Hub cache as well as no Hub: the first run's model (demo.handlers.run.first_run)
        # is then smoke on every machine, whatever a developer has downloaded.
        env.update(GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   PATTRIEVAL_CACHE=str(smoke_cache), PYTHONUNBUFFERED="1",
                   HF_HUB_CACHE=str(tmp_path_factory.mktemp("empty-hub-cache")))
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "demo", "--db", str(db), "--host", "127.0.0.1", "--port", str(port)],
                cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, so teardown reaches its children too
            )
        app = LaunchedApp(f"http://127.0.0.1:{port}/", db, process, log)
        started.append(app)
        _wait_until_up(app, APP_START_TIMEOUT_S)
        return app

    yield launch
    for app in started:
        _stop(app.process)


@pytest.fixture(scope="session")
def browser():
    """One headless chromium for the session (Debian's: Playwright cannot download browsers here)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium`", pytrace=False)
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(browser, request):
    """A fresh page (its own context: no state between tests); screenshotted at the end as
    test-artifacts/<test name>.png, whether the test passed or not."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    try:
        yield page
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        try:
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
        finally:
            context.close()

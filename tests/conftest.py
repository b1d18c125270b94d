"""Shared fixtures: tiny random-weight models of the real architectures, written once per session.

Tests never reach the network: the Hub is switched to offline mode before transformers loads.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no network: never phone home

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

HERE = Path(__file__).resolve().parent
# A test that calls one of these starts `python -m engine` in a child process (and kills it with
# SIGKILL, for the resume tests): seconds each, so it belongs to the slow set.
ENGINE_SUBPROCESS_HELPERS = frozenset({"kill_once_stored", "run_engine"})
# Fixtures that launch `python -m demo` as a child process and wait for it to serve.
APP_PROCESS_FIXTURES = frozenset({"app_process"})


def _is_slow(item: pytest.Item) -> bool:
    path = Path(str(item.path))
    if HERE / "browser" in path.parents or path.name.startswith("test_ray_"):
        return True  # headless chromium against a launched app; a local Ray instance
    if not APP_PROCESS_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
        return True
    code = getattr(getattr(item, "function", None), "__code__", None)
    return code is not None and not ENGINE_SUBPROCESS_HELPERS.isdisjoint(code.co_names)


def pytest_collection_modifyitems(config, items):
    """`slow`: browser, Ray and engine-subprocess (kill -9) tests, so that `python -m pytest -m
    "not slow"` is the quick loop; CI runs everything. A test may also carry the mark itself."""
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


# pytest-xdist (`-n auto --dist loadfile`, pyproject.toml) sends each test file to one worker,
# so a module's fixtures are built once. Files that share one costly thing of the session go to
# one worker together: the browser tests one chromium, the served tests one llama.cpp server,
# the Ray tests one machine's Ray (two Ray instances on two cores starve each other's actors).
# Grouped, the browser tests also start early (xdist hands out the units with the most tests
# first); spread over both workers they ran last, two browsers and two apps at once: the whole
# suite took 726 s instead of 682 s. pytest-xdist's own `--dist loadgroup` no longer groups on
# pytest 9.2 (its nodeid suffix is ignored: pytest-dev/pytest-xdist#1386), hence this scheduler.
# The served and Ray tests live in the folders of the code they test (engine/running, demo/handlers,
# engine/inspect_tasks), so they are grouped by file name, wherever the file is.
SHARED_BY_FOLDER = (("tests/browser/", "browser"),)
SHARED_BY_NAME = (("test_served_", "llama"), ("test_app_served.py", "llama"),
                  ("test_ray_", "ray"), ("test_app_grid.py", "ray"))


def shared_group(nodeid: str) -> str | None:
    """The group of a test file that shares a costly thing of the session, or None."""
    file = nodeid.split("::", 1)[0]
    for folder, group in SHARED_BY_FOLDER:
        if file.startswith(folder):
            return group
    name = file.rsplit("/", 1)[-1]
    for prefix, group in SHARED_BY_NAME:
        if name.startswith(prefix):
            return group
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # another --dist given: pytest-xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class SharedThingsScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_group(nodeid) or super()._split_scope(nodeid)

    return SharedThingsScheduling(config, log)


def _tiny(tmp_path_factory, name: str, **kwargs):
    from engine.generation.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp(name), **kwargs)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A tiny Llama-3-Instruct-like model folder (split "[", "1", "]" citation tokens)."""
    return _tiny(tmp_path_factory, "tiny-llama", arch="llama")


@pytest.fixture(scope="session")
def tiny_mistral_dir(tmp_path_factory):
    """A tiny Mistral-7B-Instruct-v0.3-like model folder (digits split one per token)."""
    return _tiny(tmp_path_factory, "tiny-mistral", arch="mistral")


@pytest.fixture(scope="session")
def tiny_openchat_dir(tmp_path_factory):
    """A tiny OpenChat-3.6-like model folder."""
    return _tiny(tmp_path_factory, "tiny-openchat", arch="openchat")


@pytest.fixture(scope="session")
def tiny_llama_merged_dir(tmp_path_factory):
    """Like tiny_llama_dir, but its tokenizer has "[1]".."[20]" as single tokens."""
    return _tiny(tmp_path_factory, "tiny-llama-merged", arch="llama", merged_citation_tokens=True)


@pytest.fixture(scope="session")
def tiny_llama(tiny_llama_dir):
    """The tiny Llama loaded unquantized on CPU (shared: tests must not mutate it)."""
    from engine.generation.models import load_model

    return load_model(str(tiny_llama_dir), quantize="none", device="cpu")


# ---------------------------------------------------------------- the served tests' llama.cpp server


@pytest.fixture(scope="session")
def llama_process(tmp_path_factory):
    """llama.cpp's server with SmolLM2 (tests/support/served_server.py), started once for every served
    test of the session: each start costs seconds of a core and a first completion."""
    from tests.support.served_server import llama_server

    with llama_server(tmp_path_factory.mktemp("llama")) as running:
        yield running


@pytest.fixture()
def server(llama_process):
    """The session's llama.cpp server, checked alive before and after each test: a server that
    died fails the test naming its exit signal and log, not as a refused connection."""
    llama_process.check_alive()
    yield llama_process
    llama_process.check_alive()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report names a dead llama.cpp server (exit signal, last log lines)."""
    report = yield
    served = sys.modules.get("tests.support.served_server")
    if report.failed and served is not None:
        for started in served.STARTED:
            dead = started.death()
            if dead is not None:
                report.sections.append(("llama.cpp server", dead))
    return report

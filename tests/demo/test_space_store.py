"""A Space without persistent storage (/data) still writes its store.

The Space runs as uid 1000 in the image's app folder. The old Dockerfile made that folder as root
(WORKDIR before USER), so `results/` could not be created there and the first run failed after
loading its model. These tests read the Dockerfile and .dockerignore, check where the default
store goes, and run the CLI's and the app's first run as an unprivileged user in a root-owned
folder with SPACE_ID set and no /data.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the image, read (no Docker daemon here)


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments left out."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in text.splitlines() if line.strip()]


def test_the_dockerfile_gives_the_app_folder_to_the_user_who_runs_it():
    steps = _instructions()
    users = [i for i, (op, arg) in enumerate(steps) if op == "USER"]
    workdir = next(i for i, (op, arg) in enumerate(steps) if op == "WORKDIR" and arg.strip() == "/home/user/app")
    assert users and steps[users[-1]][1].strip() == "user", "the container runs as the Space's user"
    # USER before WORKDIR (Hugging Face's Docker Spaces docs), and the folder made with its owner
    # first, since not every builder makes a WORKDIR as USER.
    assert users[0] < workdir, "WORKDIR comes before USER: the app folder would be root-owned"
    made = [arg for op, arg in steps[:workdir] if op == "RUN" and "/home/user/app" in arg]
    assert any(re.search(r"install -d -o user -g user /home/user/app\b", arg) or "chown user" in arg for arg in made)
    # Everything copied into the app folder belongs to the user too.
    for op, arg in steps[workdir:]:
        if op in ("COPY", "ADD"):
            assert "--chown=user" in arg, f"{op} {arg}: root-owned files in the app folder"


def _ignored(patterns: list[str], path: str) -> bool:
    """Docker's .dockerignore rule (moby/patternmatcher): a path is left out when a pattern
    matches it or one of its parent folders; `*` stays in a folder, `**` crosses them; `!` keeps."""
    out = False
    parts = path.split("/")
    for pattern in patterns:
        keep = pattern.startswith("!")
        pattern = os.path.normpath(pattern.lstrip("!").strip()).lstrip("/")
        # `**/` is any number of folders, none included; `*` and `?` stay within one name.
        tokens = {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
        regex = "".join(tokens.get(tok, re.escape(tok)) for tok in re.findall(r"\*\*/?|\*|\?|[^*?]+", pattern))
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            out = not keep
    return out


def test_dockerignore_leaves_a_checkouts_leftovers_out_and_keeps_what_the_app_needs():
    path = ROOT / ".dockerignore"
    assert path.is_file(), "no .dockerignore: docker build . copies .venv, results/ and .git into the image"
    patterns = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    for leftover in (".git/HEAD", ".venv/bin/python", "venv/lib/x.py", "results/pattrieval.duckdb",
                     "engine/__pycache__/paths.cpython-311.pyc", "test-artifacts/app.png", "data/old.duckdb",
                     "pattrieval.duckdb", "pattrieval.duckdb.wal", ".pytest_cache/v/x", "smoke-model/config.json"):
        assert _ignored(patterns, leftover), f"{leftover} would be copied into the image"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    needed = [f for f in tracked if f.split("/")[0] in ("engine", "demo", "store", "data", "scripts")
              or f in ("requirements.txt", "pyproject.toml", "setup.py", "README.md")]
    assert "scripts/space_entrypoint.sh" in needed and "data/sample_nq.jsonl" in needed
    assert not [f for f in needed if _ignored(patterns, f)]


# ---------------------------------------------------------------- where the default store goes


@pytest.fixture
def unwritable(monkeypatch):
    """Folders (absolute) that os.access says this user cannot write: root can write anywhere."""
    denied: set[Path] = set()
    real = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and Path(os.path.abspath(path)) in denied:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    return denied


@pytest.fixture
def space(tmp_path, monkeypatch):
    """A Space's layout: the working folder, a home, SPACE_ID; no PATTRIEVAL_DB."""
    import engine.paths

    app, home = tmp_path / "app", tmp_path / "home"
    app.mkdir(), home.mkdir()
    monkeypatch.chdir(app)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    for name in ("PATTRIEVAL_DB", "PATTRIEVAL_CACHE", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(engine.paths, "PERSISTENT", tmp_path / "no-data")  # whatever this machine has
    monkeypatch.setattr(engine.paths, "_temp_root", lambda: tmp_path / "tmp" / "pattrieval-1000")
    return app, home


def test_the_default_store_goes_where_this_user_can_write(space, unwritable):
    from engine.paths import cache_dir, default_db_path

    app, home = space
    assert default_db_path() == Path("results") / "pattrieval.duckdb"  # a writable app folder: as before
    unwritable.add(app)  # the old image: a root-owned app folder
    assert default_db_path() == home / ".local" / "share" / "pattrieval" / "pattrieval.duckdb"
    assert cache_dir() == home / ".cache" / "pattrieval"
    unwritable.add(home)  # no writable home either
    assert default_db_path() == app.parent / "tmp" / "pattrieval-1000" / "pattrieval.duckdb"
    assert cache_dir() == app.parent / "tmp" / "pattrieval-1000" / "cache"
    # A store already there is read where it is (a read-only folder still browses it).
    (app / "results").mkdir()
    (app / "results" / "pattrieval.duckdb").write_bytes(b"")
    assert default_db_path() == Path("results") / "pattrieval.duckdb"


def test_the_first_screen_says_when_results_will_not_survive_a_restart(space, unwritable, monkeypatch):
    import engine.paths
    from demo.handlers.run import store_note
    from demo.settings import settings_from_env
    from engine.paths import transient_store

    app, home = space
    # A Space without /data: whatever folder the store is in, it goes with the container.
    note = store_note(settings_from_env())
    assert note == "Results are kept only until this Space restarts: it has no persistent storage (/data)."
    assert store_note(settings_from_env(read_only=True)) == ""  # nothing is run there
    # With /data, the entry point puts the store there: it lasts; a store named elsewhere does not.
    engine.paths.PERSISTENT.mkdir()
    assert transient_store(engine.paths.PERSISTENT / "pattrieval.duckdb") is None
    assert transient_store(app / "results" / "pattrieval.duckdb") == (
        "Results are kept only until this Space restarts: the store is not on its persistent storage (/data).")
    engine.paths.PERSISTENT.rmdir()
    # The desktop: a store in the working folder lasts; the temporary fallback may be cleared.
    monkeypatch.delenv("SPACE_ID")
    assert store_note(settings_from_env()) == ""
    unwritable.update((app, home))
    assert "temporary folder" in store_note(settings_from_env())
    # The sentence is Markdown-escaped like any text the app shows.
    monkeypatch.setattr(engine.paths, "transient_store", lambda path: "a *b* [c](d) <i>")
    assert store_note(settings_from_env()) == "a \\*b\\* \\[c\\](d) &lt;i&gt;"


def test_a_run_refuses_a_store_it_cannot_write_before_anything_is_written_or_loaded(space, unwritable, tmp_path):
    from engine.errors import UserError
    from engine.prompting.prompts import PromptConfig, metadata_type
    from engine.running.run_request import RunRequest
    from engine.usecases.runs.run import ExperimentRequest, run_experiment

    app, home = space
    unwritable.add(app)
    loaded = []
    run = RunRequest(model="smoke", modes=("vanilla",), prompt=PromptConfig(mode="vanilla", metadata=metadata_type("gender")),
                     max_new_tokens=4, limit=1)
    request = ExperimentRequest(run, ROOT / "data" / "sample_nq.jsonl", app / "results" / "runs.duckdb")
    with pytest.raises(UserError) as err:
        run_experiment(request, load=lambda r: loaded.append(r))
    from demo.field_words import app_message
    from engine.commands._field_words import cli_message

    line = f"cannot write the store {app / 'results' / 'runs.duckdb'}: the folder {app} is not writable by this user"
    assert cli_message(err.value) == f"{line}; name a writable one with --db or PATTRIEVAL_DB"
    # A failed job's line in the app (demo.job_work): the operator's setting, not a CLI option.
    assert app_message(err.value) == f"{line}; name a writable one with PATTRIEVAL_DB where the app starts"
    assert not loaded and list(app.iterdir()) == [] and list(home.iterdir()) == []  # no smoke model written either


# ---------------------------------------------------------------- as the Space runs it: another user


def _reachable(path: Path) -> bool:
    """Whether a user other than the owner can reach and read `path` (every folder above searchable)."""
    path = Path(os.path.realpath(path))
    folders_ok = all(os.stat(p).st_mode & stat.S_IXOTH for p in path.parents)
    return folders_ok and bool(os.stat(path).st_mode & stat.S_IROTH)


@pytest.fixture
def as_space_user(tmp_path):
    """(run(args, cwd) as an unprivileged user, the root-owned app folder, the user's home).

    The user is `nobody`; the app folder is root-owned (0755) and the home is the user's, both
    under the system temp folder (pytest's tmp_path is root's alone). Where this machine's Python
    lives in a root-only folder (/root/.pyenv), the child keeps CAP_DAC_READ_SEARCH to reach it:
    that lets it read and search anything, and write nothing more than the user may."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root to run a child as another user")
    if Path("/data").exists():
        pytest.skip("this machine has /data: a Space without persistent storage cannot be simulated")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv (util-linux) to run a child as another user")
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no unprivileged user 'nobody' on this machine")
    command = [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    if not (_reachable(Path(sys.executable)) and _reachable(ROOT / "engine" / "__main__.py")):
        command += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    probe = subprocess.run([*command, sys.executable, "-c", "import os; print(os.getuid())"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 or probe.stdout.strip() != str(user.pw_uid):
        pytest.skip(f"cannot start Python as {user.pw_name}: {probe.stderr.strip()[-200:]}")
    base = Path(tempfile.mkdtemp(prefix="pattrieval-space-"))
    os.chmod(base, 0o755)
    app, home = base / "app", base / "home"
    app.mkdir(mode=0o755), home.mkdir(mode=0o755)
    os.chown(home, user.pw_uid, user.pw_gid)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "SPACE_ID": "someone/pattrieval",
           "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false",
           "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"}

    def run(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([*command, sys.executable, *args], cwd=app, env=env, capture_output=True, text=True,
                              timeout=300)

    try:
        yield run, app, home
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_the_cli_first_run_writes_its_store_as_the_space_user_without_data(as_space_user):
    run, app, home = as_space_user
    done = run(["-m", "engine", "run", "--model", "smoke", "--dataset", str(ROOT / "data" / "sample_nq.jsonl"),
                "--limit", "1", "--modes", "vanilla", "--max-new-tokens", "4"])
    assert done.returncode == 0, done.stderr[-2000:]
    store = home / ".local" / "share" / "pattrieval" / "pattrieval.duckdb"
    assert f"note: {app / 'results'} cannot be written here; the store is {store}" in done.stderr
    assert store.is_file() and list(app.iterdir()) == []
    listed = run(["-m", "engine", "list"])  # the next command finds the same store
    assert listed.returncode == 0 and "smoke" in listed.stdout, listed.stderr[-2000:]


@pytest.mark.slow
def test_a_store_named_where_the_user_cannot_write_is_refused_before_the_model_loads(as_space_user):
    run, app, home = as_space_user
    done = run(["-m", "engine", "run", "--model", "smoke", "--dataset", str(ROOT / "data" / "sample_nq.jsonl"),
                "--limit", "1", "--modes", "vanilla", "--db", str(app / "runs.duckdb")])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: cannot write the store {app / 'runs.duckdb'}: the folder {app} is not writable by this user; "
        "name a writable one with --db or PATTRIEVAL_DB"]
    assert list(home.iterdir()) == [] and list(app.iterdir()) == []  # not even the smoke model


APP_FIRST_RUN = """
import sys, time
from dataclasses import replace
from demo.handlers.run import first_run_form, run_batch
from demo.jobs import JobQueue
from demo.settings import settings_from_env

settings = settings_from_env()
form = first_run_form(settings, gpu=False, available=lambda model_id: False)  # offline: the smoke model
# The one-click first run's form, on one item in one mode and short answers (seconds, not a minute).
form = replace(form, limit=1, modes=("vanilla",), max_new_tokens=4)
jobs = JobQueue()
job = run_batch(jobs, settings, form)
deadline = time.monotonic() + 240
while (status := jobs.status(job)).state not in ("complete", "cancelled", "failed") and time.monotonic() < deadline:
    time.sleep(0.2)
jobs.shutdown(timeout=5)
print(form.model, status.state, status.message, settings.db_path, sep="\\n")
"""


@pytest.mark.slow
def test_the_apps_first_run_completes_as_the_space_user_without_data(as_space_user):
    run, app, home = as_space_user
    done = run(["-c", APP_FIRST_RUN])
    assert done.returncode == 0, done.stderr[-2000:]
    model, state, message, db = done.stdout.strip().splitlines()[-4:]
    assert (model, state) == ("smoke", "complete"), message
    assert Path(db) == home / ".local" / "share" / "pattrieval" / "pattrieval.duckdb" and Path(db).is_file()
    assert list(app.iterdir()) == []  # what the first screen says of it: test_the_first_screen_says_...

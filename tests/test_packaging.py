"""The install story: the README's first command starts the app, CI runs its test command, installs
use exact pins, and the README's front matter makes the repository a Docker Space that starts the app."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", readme, re.S)
    assert block, "README has no Quick start bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _section(text: str, heading: str) -> str:
    """From `heading` to the next heading of its level (or the end)."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = _readme_commands()
    assert len(commands) == 2, commands
    assert commands[0] == "pip install torch==2.13.0 -r requirements.txt && python -m demo"
    test_command = commands[1]
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci, "the last command of .ci/run must be the README's test command"
    assert "venv" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_both_readme_commands_install_the_compiled_pins():
    for command in _readme_commands():
        files = re.findall(r"-r (\S+)", command)
        assert files, command
        for name in files:
            assert name.endswith(".txt"), f"{command!r} installs ranges, not pins"
            assert "torch==2.13.0" in command, command


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        pkg, sep, version = line.partition("==")
        assert sep, f"{name}: {line!r} is not an exact pin"
        pins[pkg.lower()] = version
    return pins


def test_pins_cover_every_range_and_agree_between_runtime_and_dev():
    runtime, dev = _pins("requirements.txt"), _pins("requirements-dev.txt")
    for line in (ROOT / "requirements.in").read_text(encoding="utf-8").splitlines():
        name = re.match(r"^([A-Za-z0-9_.-]+)", line.strip())
        if name and not line.startswith("#") and name.group(1) != "torch":
            assert name.group(1).lower() in runtime, f"{name.group(1)} is not pinned"
    # torch is installed by name in the commands, so that each machine gets its own build.
    assert "torch" not in runtime and "torch" not in dev
    assert {k: v for k, v in dev.items() if k in runtime} == runtime
    assert "pytest" in dev


def test_ray_pins_cover_its_range_agree_with_runtime_and_dev_and_the_test_command_installs_them():
    runtime, dev, ray = _pins("requirements.txt"), _pins("requirements-dev.txt"), _pins("requirements-ray.txt")
    assert "ray" in ray and re.match(r"2\.60\.", ray["ray"]), ray.get("ray")
    for line in (ROOT / "requirements-ray.in").read_text(encoding="utf-8").splitlines():
        name = re.match(r"^([A-Za-z0-9_.-]+)", line.strip())
        if name and not line.startswith(("#", "-")):
            assert name.group(1).lower() in ray, f"{name.group(1)} is not pinned"
    # Installed beside the other two, it must not move a shared package to another version.
    assert {k: v for k, v in ray.items() if k in runtime} == {k: v for k, v in runtime.items() if k in ray}
    assert {k: v for k, v in ray.items() if k in dev} == {k: v for k, v in dev.items() if k in ray}
    # Optional: the app and the runtime install never pull Ray in; torch is named in the commands.
    assert "ray" not in runtime and "ray" not in dev and "torch" not in ray
    assert "-r requirements-ray.txt" in _readme_commands()[1]
    assert "-r requirements-ray.txt" not in _readme_commands()[0]


def test_ci_installs_chromium_before_the_test_command_when_it_is_missing():
    # The browser tests (tests/browser) drive Debian's chromium; Playwright cannot fetch one here.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    test_line = ci.index(_readme_commands()[1])
    install = [i for i, line in enumerate(ci) if "apt-get install -y chromium" in line]
    assert install and max(install) < test_line
    assert any("! -x /usr/bin/chromium" in line for line in ci[: min(install)])


def _front_matter() -> dict[str, str]:
    """The README's YAML header, which Hugging Face reads as the Space's card (flat keys only)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("---\n"), "README.md must open with the Space's YAML front matter"
    header, sep, _ = readme[4:].partition("\n---\n")
    assert sep, "the front matter has no closing ---"
    fields = {}
    for line in header.splitlines():
        key, colon, value = line.partition(":")
        assert colon and key == key.strip() and value.startswith(" "), f"not a flat 'key: value' line: {line!r}"
        fields[key] = value.strip()
    return fields


def test_readme_front_matter_makes_a_docker_space_on_the_apps_port():
    fields = _front_matter()
    assert {"title", "sdk", "app_port", "suggested_hardware", "license", "short_description"} <= set(fields)
    assert fields["sdk"] == "docker"
    # Hugging Face's hardware names and its 60-character limit on the short description.
    assert fields["suggested_hardware"] in ("t4-small", "t4-medium", "l4x1", "a10g-small", "a10g-large", "a100-large")
    assert 0 < len(fields["short_description"]) <= 60
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert f"GRADIO_SERVER_PORT={fields['app_port']}" in dockerfile and f"EXPOSE {fields['app_port']}" in dockerfile
    assert "GRADIO_SERVER_NAME=0.0.0.0" in dockerfile


def test_the_docker_entry_point_starts_the_app_and_the_cli_quickstart_stays_documented():
    import os

    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    entry = re.search(r'^ENTRYPOINT \["([^"]+)"\]', dockerfile, re.M)
    assert entry and entry.group(1) == "/home/user/app/scripts/space_entrypoint.sh"
    script = ROOT / "scripts" / "space_entrypoint.sh"
    assert os.access(script, os.X_OK)
    lines = [line.strip() for line in script.read_text(encoding="utf-8").splitlines()]
    assert lines[-1] == "exec python -m demo"  # no arguments: the app
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = _section(readme, "## Quick start")
    assert "python -m engine quickstart" in quick_start


def test_the_license_file_and_the_space_front_matter_name_the_same_license():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License")
    assert _front_matter()["license"] == "mit"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # a stranger who wants to cite the tool finds the three papers it implements
    section = _section(readme, "## License and how to cite")
    for paper in ("PAttriEval", "self-interpretations", "Automatic Evaluation of Attribution"):
        assert paper in section, paper


# ------------------------------------------------------------------ the installable package

def _requirement_lines(name: str) -> list[str]:
    """The requirement lines of a .in file: no comments, no pip options (-r, -c)."""
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith(("#", "-"))]


def test_the_package_metadata_reads_its_ranges_from_the_requirement_files():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert "dependencies" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.in"]}
    # The extras repeat the ranges of files that hold pip options, which package metadata cannot.
    extras = project["project"]["optional-dependencies"]
    assert extras["ray"] == _requirement_lines("requirements-ray.in")
    assert extras["dev"] == _requirement_lines("requirements-dev.in")
    assert project["project"]["scripts"] == {"pattrieval": "engine.__main__:main", "pattrieval-app": "demo.__main__:main"}


def test_ci_lints_and_type_checks_before_the_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    test_line = ci.index(_readme_commands()[1])
    assert ci.index("ruff check .") < test_line and ci.index("mypy") < test_line
    dev = _pins("requirements-dev.txt")
    assert "ruff" in dev and "mypy" in dev


def _source_files(folder: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The package's wheel, built once from a copy (setuptools' build/ and egg-info stay out of the checkout)."""
    import shutil
    import subprocess
    import sys

    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "requirements.in"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("engine", "store", "demo", "data"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "--quiet", "-w", str(tmp_path / "dist"), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = (tmp_path / "dist").glob("pattrieval-*.whl")
    return built


def test_the_wheel_carries_every_module_the_migrations_the_sample_and_both_console_scripts(wheel):
    import configparser
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(zf.read(info).decode())
        sample = zf.read("engine/bundled/sample_nq.jsonl")
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert dict(entry_points["console_scripts"]) == {"pattrieval": "engine.__main__:main",
                                                     "pattrieval-app": "demo.__main__:main"}
    # Every module of the three packages (a new sub-package too), and nothing of the tests.
    modules = _source_files("engine") | _source_files("store") | _source_files("demo")
    assert modules <= names, sorted(modules - names)
    assert not any(n.startswith(("tests/", "scripts/", "data/")) for n in names)
    # What the code reads at run time: the store's SQL (migrations, views) and the bundled sample.
    sql = {p.relative_to(ROOT).as_posix() for p in (ROOT / "store").rglob("*.sql")}
    assert "store/views.sql" in sql and "store/migrations/001_initial.sql" in sql
    assert sql <= names, sorted(sql - names)
    assert sample == (ROOT / "data" / "sample_nq.jsonl").read_bytes()
    from packaging.requirements import Requirement

    def ranges(lines):
        return {(r.name.lower(), frozenset(map(str, r.specifier))) for r in map(Requirement, lines) if not r.marker}

    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert ranges(requires) == ranges(_requirement_lines("requirements.in"))


def test_the_sample_dataset_is_found_in_a_checkout_and_in_an_installed_package():
    from engine.paths import SAMPLE_DATASET

    assert SAMPLE_DATASET.is_file() and SAMPLE_DATASET.name == "sample_nq.jsonl"
    # In a checkout it is data/, where the README's commands name it; setup.py maps that folder
    # to engine/bundled/ in the wheel, where paths.py looks first.
    assert SAMPLE_DATASET == ROOT / "data" / "sample_nq.jsonl"
    assert "engine.bundled" in (ROOT / "setup.py").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """The wheel installed as pip installs it (its console scripts too), its dependencies taken from
    this interpreter's environment: (its bin folder, the environment to run it in, a folder with
    no checkout around it)."""
    import os
    import subprocess
    import sys

    target = tmp_path_factory.mktemp("installed")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                           "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {**os.environ, "PYTHONPATH": str(target), "HOME": str(elsewhere), "PATTRIEVAL_DB": str(elsewhere / "s.duckdb")}
    return target / "bin", env, elsewhere


def _installed_run(installed, *args: str):
    import subprocess

    bin_dir, env, elsewhere = installed
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_installed_package_runs_from_its_own_files_and_names_itself_as_invoked(installed):
    bin_dir, env, elsewhere = installed
    where = _installed_run(installed, "pattrieval", "--version")
    assert where.returncode == 0 and where.stdout.startswith("pattrieval "), where.stderr
    import subprocess
    import sys

    engine_file = subprocess.run([sys.executable, "-c", "import engine; print(engine.__file__)"], cwd=elsewhere,
                                 env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(engine_file).is_relative_to(bin_dir.parent), engine_file  # not the checkout's
    cli = _installed_run(installed, "pattrieval", "--help")
    assert cli.returncode == 0 and cli.stdout.startswith("usage: pattrieval "), cli.stdout[:200]
    assert "python -m engine" not in cli.stdout and "start with:  pattrieval quickstart" in cli.stdout
    sub = _installed_run(installed, "pattrieval", "validate", "--help")
    assert sub.stdout.startswith("usage: pattrieval validate "), sub.stdout[:200]
    app = _installed_run(installed, "pattrieval-app", "--help")
    assert app.returncode == 0 and app.stdout.startswith("usage: pattrieval-app "), app.stdout[:200]


def test_the_installed_app_help_describes_every_operator_setting_the_code_reads(installed):
    import re

    read = set()
    for folder in ("demo", "engine", "store"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"PATTRIEVAL_[A-Z_]+", path.read_text(encoding="utf-8")))
    assert "PATTRIEVAL_MAX_ITEMS" in read
    text = _installed_run(installed, "pattrieval-app", "--help").stdout
    assert "README" not in text  # the wheel carries none
    # Each one on a line of its own with what it does, not a bare list of names.
    described = set(re.findall(r"^  (PATTRIEVAL_[A-Z_]+)(?:=\S+)? +\S", text, re.M))
    assert read <= described, sorted(read - described)
    assert "HF_TOKEN" in text and "GRADIO_SERVER_PORT" in text


@pytest.mark.parametrize("options", [(), ("--skip-invalid",)])
def test_the_installed_package_finds_its_sample_by_name_from_any_folder(installed, options):
    done = _installed_run(installed, "pattrieval", "validate", "--dataset", "sample", *options)
    assert done.returncode == 0, done.stderr
    assert "items     67 valid" in done.stdout
    assert "/engine/bundled/sample_nq.jsonl" in done.stdout  # the wheel's copy: there is no checkout here


def test_a_path_to_the_sample_that_is_not_there_says_what_its_name_is(installed):
    for typed in ("sample_nq.jsonl", "data/sample_nq.jsonl"):
        done = _installed_run(installed, "pattrieval", "validate", "--dataset", typed)
        assert done.returncode == 2
        assert done.stderr.strip() == f"error: {typed}: no such file or folder (the bundled sample is named 'sample')"


def test_every_command_that_reads_a_dataset_takes_sample_and_says_so(tmp_path, monkeypatch, capsys):
    """From a folder with no data/: import and report as validate; run reads it as import does
    (engine.datasets.data.load_dataset); a file of that name in the folder is still read as a path."""
    import argparse
    import json

    from engine import api
    from engine.__main__ import build_parser, main
    from engine.paths import SAMPLE_DATASET

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    takes = sorted(name for name, p in sub.choices.items() if any("--dataset" in a.option_strings for a in p._actions))
    assert takes == ["import", "report", "run", "selfcheck", "validate"]
    for name in takes:
        (action,) = [a for a in sub.choices[name]._actions if "--dataset" in a.option_strings]
        assert "sample" in action.help.replace("sample_nq", ""), (name, action.help)

    monkeypatch.chdir(tmp_path)
    assert api.load_dataset("sample").source == str(SAMPLE_DATASET)
    (tmp_path / "answers.jsonl").write_text(json.dumps({"item_id": "nq-001", "answer": "Jane Austen [1]"}) + "\n")
    db = str(tmp_path / "s.duckdb")
    assert main(["import", "--dataset", "sample", "--answers", "answers.jsonl", "--experiment", "e", "--db", db]) == 0
    capsys.readouterr()
    assert main(["report", "--dataset", "sample", "--table", "1", "--format", "json", "--db", db]) == 0
    assert "sample_nq.jsonl" in capsys.readouterr().out
    # The app: its dataset choice is the sample; typed in the desktop's path box, the name works too.
    from demo.handlers.run import RunForm, dataset_path
    from demo.settings import AppSettings

    desktop = AppSettings(db_path=tmp_path / "s.duckdb")
    assert dataset_path(desktop, RunForm()) == dataset_path(desktop, RunForm(local_path="sample")) == str(SAMPLE_DATASET)
    # A file of that name in the working folder is the user's, read as any path.
    (tmp_path / "sample").write_text("{}\n")
    with pytest.raises(api.UserError, match="^sample: unknown dataset format"):
        api.load_dataset("sample")


def test_the_install_docs_say_how_to_install_the_package_with_the_tested_pins():
    install = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    section = _section(install, "## As a package: pip install .")
    assert "pip install torch==2.13.0 . -c requirements.txt" in section
    assert "pattrieval validate --dataset sample" in section

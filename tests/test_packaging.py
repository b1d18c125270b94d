"""The install story: CI runs the README's test command, and installs use exact pins."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", readme, re.S)
    assert block, "README has no Quick start bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = _readme_commands()
    assert len(commands) == 2, commands
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


def test_ci_installs_chromium_before_the_test_command_when_it_is_missing():
    # The browser tests (tests/browser) drive Debian's chromium; Playwright cannot fetch one here.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    test_line = ci.index(_readme_commands()[1])
    install = [i for i, line in enumerate(ci) if "apt-get install -y chromium" in line]
    assert install and max(install) < test_line
    assert any("! -x /usr/bin/chromium" in line for line in ci[: min(install)])

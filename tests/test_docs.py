"""The docs stay in step with the code: the option references are generated from the parsers and
must be current, every public API endpoint and every setting the code reads is named, the README
stays a short front door, and no link points nowhere."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tests.support.helpers import load_script

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _generator():
    """scripts/cli_reference.py as a module (scripts/ is not a package)."""
    return load_script("cli_reference")


def test_the_generated_option_references_are_what_the_parsers_give_now():
    generator = _generator()
    for path, expected in generator.generated().items():
        assert _read(path) == expected, (
            f"{path.relative_to(ROOT)} is out of date: run python scripts/cli_reference.py and commit it")


def _reference(text: str, start: str, end: str) -> str:
    assert text.count(start) == 1 and text.count(end) == 1, "the generated reference's markers"
    return text.split(start, 1)[1].split(end, 1)[0]


def test_the_cli_reference_has_every_command_and_every_option():
    # Walked here independently of the generator, so an option it skipped would fail too.
    from engine.__main__ import build_parser

    generator = _generator()
    reference = _reference(_read(DOCS / "cli.md"), generator.START, generator.END)
    sections = dict(re.findall(r"^### (\S+)\n(.*?)(?=^### |\Z)", reference, re.S | re.M))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sections) == list(sub.choices), "one section per command, in --help order"
    for name, command in sub.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help is argparse.SUPPRESS:
                continue
            for option in action.option_strings or [action.metavar or action.dest]:
                assert re.search(rf"`{re.escape(option)}[` ]", sections[name]), f"{name}: {option}"


def test_the_app_options_are_all_in_app_md():
    from demo.__main__ import build_parser

    generator = _generator()
    reference = _reference(_read(DOCS / "app.md"), generator.APP_START, generator.APP_END)
    for action in build_parser()._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert re.search(rf"`{re.escape(option)}[` ]", reference), option


def _public_api_names(tmp_path) -> set[str]:
    from demo.app import build_app
    from demo.settings import AppSettings

    app = build_app(AppSettings(tmp_path / "none.duckdb"))
    try:
        dependencies = app.get_config_file()["dependencies"]
    finally:
        app.jobs.shutdown()
    return {d["api_name"] for d in dependencies if d.get("api_name") and d.get("api_visibility") == "public"}


def test_every_public_endpoint_of_the_app_is_named_in_app_md(tmp_path):
    names = _public_api_names(tmp_path)
    # The listing itself works: the endpoints scripts have relied on since the first release.
    assert {"run_batch", "run_status", "cancel_run", "runs", "bias_table", "query_detail", "sql"} <= names
    app_md = _read(DOCS / "app.md")
    # `\b` keeps /explain from counting as /explain_run's mention and the other way round.
    missing = sorted(name for name in names if not re.search(rf"`/{re.escape(name)}\b", app_md))
    assert not missing, f"public endpoints not named in docs/app.md: {missing}"


def _settings_the_code_reads() -> set[str]:
    sources = [p for folder in ("engine", "store", "demo", "scripts") for p in (ROOT / folder).rglob("*.py")]
    sources += [ROOT / "Dockerfile", *(ROOT / "scripts").glob("*.sh")]
    text = "\n".join(_read(p) for p in sources)
    names = set(re.findall(r"\bPATTRIEVAL_[A-Z][A-Z_]*[A-Z]\b", text))
    # Other variables the app reads itself (SPACE_ID: Hugging Face marks every Space with it).
    for path in (ROOT / "demo").rglob("*.py"):
        names |= set(re.findall(r"environ(?:\.get\(|\[)\"([A-Z][A-Z0-9_]*)\"", _read(path)))
    return names


def test_every_setting_the_code_reads_is_named_in_operations_md():
    names = _settings_the_code_reads()
    assert {"PATTRIEVAL_DB", "PATTRIEVAL_MAX_ITEMS", "PATTRIEVAL_OPERATOR", "SPACE_ID"} <= names
    operations = _read(DOCS / "operations.md")
    missing = sorted(name for name in names if f"`{name}" not in operations)
    assert not missing, f"settings not named in docs/operations.md: {missing}"


def test_the_readme_is_a_short_front_door_to_every_doc():
    readme = _read(ROOT / "README.md")
    assert len(readme.splitlines()) < 150
    for doc in sorted(DOCS.glob("*.md")):
        if doc.name != "README.md":
            assert f"](docs/{doc.name})" in readme, f"the README does not link docs/{doc.name}"
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme)
    assert images and all((ROOT / image).is_file() for image in images)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    anchors, fence = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def test_every_relative_link_in_the_readme_and_docs_leads_somewhere():
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)\s]+)\)", _read(page)):
            if re.match(r"[a-z]+:", target):
                continue  # http, https, mailto: not checked offline
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.relative_to(ROOT)}: {target} does not exist"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(_read(linked)), f"{page.relative_to(ROOT)}: no heading for {target}"

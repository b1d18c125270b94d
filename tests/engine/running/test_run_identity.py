"""A run's identity (its config_hash) is what lets a store resume: the same request must hash the
same whichever face built it and whatever the code that builds requests looks like. These hashes
were computed before the run options were declared in one table, so a refactor of the options,
the form or the request that changed a single stored run's identity fails here."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from demo.handlers.grid import build_study_request
from demo.handlers.run import RunForm, build_run_request
from demo.settings import AppSettings
from engine.commands import run as run_command
from engine.prompting.prompts import PromptConfig, metadata_type
from engine.running.experiment import config_hash, experiment_key, experiment_settings
from engine.running.run_request import Rerun, RunRequest, run_config
from engine.types import MODES
from engine.usecases.runs.run import resolved
from engine.usecases.study.study import check_study, grid_of

MODEL = "org/model"
SHA = "0123456789abcdef"

# The CLI's arguments (after `run --dataset sample --model org/model`) and each mode's hash.
CLI_CASES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "defaults": ((), {"vanilla": "771a43f070ad740b21f6", "base": "37fae5d150c0f4b039ea", "cf": "9b7e399a0d24a41052ce"}),
    "sampling": (("--sample", "--temperature", "0.7", "--top-p", "0.9", "--sample-top-k", "40", "--seed", "3",
                  "--top-logprobs", "2", "--max-new-tokens", "32"),
                 {"vanilla": "2644f498a78034b72427", "base": "ea3df619471dd8364ec9", "cf": "fbb3028c23d01c751746"}),
    "prompt": (("--metadata", "age", "--label-a", "young", "--label-b", "old", "--consideration", "Some are young.",
                "--extra-label", "middle", "--top-k", "5", "--order", "random", "--few-shot", "1", "--xai", "direct",
                "--relevant-at", "last", "--repetition", "distractor", "--label-scope", "relevant",
                "--citation-syntax", "paper", "--quantize", "none"),
               {"vanilla": "b08d98042ba9c2c61d56", "base": "b134aeb1bf9d7a2d590a", "cf": "48e93ae09b4bd5c810ce"}),
}


def cli_request(*extra: str) -> RunRequest:
    parser = argparse.ArgumentParser()
    run_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["run", "--dataset", "sample", "--model", MODEL, "--max-new-tokens", "256", *extra])
    # As `run` does with one configuration: the lists parsed, then the single run's request.
    grid = grid_of(vars(args))
    single = run_command.configuration_args(args, grid.configurations()[0], grid)
    return resolved(run_command.build_request(single, single.model, None))


def hashes(request: RunRequest) -> dict[str, str]:
    return {mode: config_hash(request.label, SHA, run_config(request, mode)) for mode in request.modes}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_the_cli_builds_requests_with_the_identities_stored_runs_have(case):
    extra, expected = CLI_CASES[case]
    assert hashes(cli_request(*extra)) == expected


def test_the_app_and_the_api_build_the_same_identities_as_the_cli(tmp_path: Path):
    settings = AppSettings(tmp_path / "db.duckdb")
    form = RunForm(model=MODEL, metadata="hai", limit=None, max_new_tokens=256)
    app = build_run_request(settings, form)
    api = RunRequest(model=MODEL, modes=MODES, prompt=PromptConfig(metadata=metadata_type("hai")))
    assert hashes(app) == hashes(api) == CLI_CASES["defaults"][1]
    sampled = RunForm(model=MODEL, metadata="hai", limit=None, max_new_tokens=32, sample=True, temperature=0.7,
                      top_p=0.9, sample_top_k=40, seed=3, top_logprobs=2)
    assert hashes(build_run_request(settings, sampled)) == CLI_CASES["sampling"][1]


def test_a_study_grids_configurations_keep_their_identities(tmp_path: Path):
    settings = AppSettings(tmp_path / "db.duckdb")
    form = RunForm(model=MODEL, metadata="gender,race", top_k="3,5", limit=None, max_new_tokens=256)
    study = build_study_request(settings, form)
    requests = check_study(study)
    keys = [experiment_key(r.label, SHA, experiment_settings(run_config(r, "base"))) for r in requests]
    assert keys == ["0d989505fb111fcce9ae", "361164607ae19a783fc0", "9b8a33bb58233c0446a7", "7bb8fe9fa94e0e4bd84b"]
    assert hashes(requests[0]) == {"vanilla": "49ce3c96391be5291f19", "base": "342b5033f6006c5bcffa",
                                   "cf": "931ad579597e128393eb"}


def test_a_sampled_reruns_identity_is_kept():
    rerun = RunRequest(model=MODEL, modes=MODES, prompt=PromptConfig(metadata=metadata_type("gender")),
                       sample=True, seed=5, rerun=Rerun("e1", 2))
    assert hashes(rerun) == {"vanilla": "05f706889f281dbcc9ce", "base": "cc1812856fa5c4d69fe1",
                             "cf": "ca72041ba362ec91e438"}

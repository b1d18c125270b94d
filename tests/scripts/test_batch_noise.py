"""scripts/batch_noise.py: the same prompts in other batch compositions, on the CPU, as the issue's
measure asks; batch-invariant generation must show no change in any composition of one batch size."""

from __future__ import annotations

import re

from tests.support.helpers import load_script


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in ("length-sorted", "batch-invariant"):
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_batch_invariant_rows_show_no_change_and_the_table_is_complete(capsys):
    script = load_script("batch_noise")
    assert script.main(["--model", "shape:mistral", "--limit", "5", "--max-new-tokens", "4", "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert set(rows) == {(b, c) for b in ("length-sorted", "batch-invariant") for c in script.COMPOSITIONS}
    for composition in ("batch 64", "shuffled", "mixed modes"):
        n, text, cited, logprobs, largest, median = rows[("batch-invariant", composition)]
        assert (n, text, cited, logprobs, largest, median) == ("10", "0.0%", "0.0%", "0.0%", "-", "-")
    assert re.search(r"batch-invariant [\d.]+ s \([\d.]+x the time\)", out)


def test_change_counts_text_citations_and_the_first_differing_log_prob():
    script = load_script("batch_noise")
    a = script.Answer("x [1]", frozenset({1}), (-0.5, -1.0, -2.0))
    same_text = script.Answer("x [1]", frozenset({1}), (-0.5, -1.25, -2.5))
    other = script.Answer("y [2]", frozenset({2}), (-0.75, -1.0))
    change = script.change("c", {"p": a, "q": a, "r": a}, {"p": a, "q": same_text, "r": other})
    assert (change.n, change.text, change.cited, change.logprobs) == (3, 1 / 3, 1 / 3, 2 / 3)
    assert (change.max_delta, change.median_delta) == (0.25, 0.25)

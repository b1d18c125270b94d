"""Judges end to end, through the CLI: answers citing four documents of the bundled sample's
first four items, imported (`import`) as the vanilla, base and cf runs of one experiment; one
`verify` with two tiny NLI judges of different architectures (BERT, DeBERTa-v2) and the tiny LLM
judge; human labels of part of the cited documents written from the stored citations by a fixed
rule and imported (`import-labels`); then `agreement --format json`, every number of which is
recomputed here from the `judgements` view's rows with statsmodels, krippendorff and the PPI
formula run directly, and the `judge_agreement` view's n and raw agreement set against it.

The answers are imported rather than generated: the tiny generation model's answers cite nothing,
and rewriting a run's stored answers in SQL would leave its `citations` rows behind (import-labels
reads those). The tiny Llama serves as the LLM judge instead, rewired to say attributable: with
random weights it never says a class word, and every one of its verdicts would be NULL."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.paths import SAMPLE_DATASET
from tests.support.helpers import cli, rows
from tests.support.nli_models import write_nli_model

CATS = ("attributable", "not_attributable")
# Each answer cites four of the ten shown documents: [1], [2] in sentence 0, [3], [4] in 1.
ANSWER = "It was {n} [1][2]. It is also given in [3, 4]."
ITEMS = ("nq-001", "nq-002", "nq-003", "nq-004")  # the sample's first four
HUMAN_ITEMS = 2  # the human labels every cited document of the first two items, in every run


# The rigged LLM judge's answer, token by token: distinct tokens, so that each follows from the one
# before it alone; "attribuTaBle" is the class word attributable to the judge's parser (any case).
SAYS = ("at", "t", "ri", "b", "u", "T", "a", "B", "le")


def write_attributable_llm(folder: Path, tiny: Path) -> Path:
    """The tiny Llama rewired to answer "attribuTaBle" to any prompt (a random-weight one says no
    class word, so every verdict would be NULL). Attention and feed-forward outputs are 0, so the
    last hidden state is the last token's embedding: a distinct basis vector e_i for each token of
    SAYS, e_0 for every other token; lm_head maps e_0 to SAYS[0], e_i to the token after SAYS[i-1],
    and the last to end of text."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(tiny, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    ids = [tok.convert_tokens_to_ids(t) for t in SAYS]
    assert len(set(ids)) == len(SAYS) and tok.unk_token_id not in ids and tok.decode(ids) == "attribuTaBle"
    model: Any = AutoModelForCausalLM.from_pretrained(folder)  # its submodules' types are not tracked
    basis = torch.eye(model.config.hidden_size)
    with torch.no_grad():
        embed, head = model.get_input_embeddings().weight, model.lm_head.weight
        embed[:] = basis[0]
        head.zero_()
        head[ids[0]] = 10 * basis[0]
        for i, token in enumerate(ids, start=1):
            embed[token] = basis[i]
            head[ids[i] if i < len(ids) else tok.eos_token_id] = 10 * basis[i]
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
    model.save_pretrained(folder)
    return folder


def relevant_documents() -> set[str]:
    """The sample's documents marked relevant (they hold the answer): the human's rule."""
    lines = SAMPLE_DATASET.read_text(encoding="utf-8").splitlines()
    return {d["id"] for line in lines for d in json.loads(line)["documents"] if d.get("relevant")}


def view_verdicts(db: Path) -> dict[str, dict[tuple, str]]:
    """judge -> {(run, item, position): attributable | not_attributable}, NULL verdicts left out."""
    out: dict[str, dict[tuple, str]] = {}
    for judge, run, item, position, attributable in rows(
            db, "SELECT judge, run_id, item_id, position, attributable FROM judgements"):
        out.setdefault(judge, {})
        if attributable is not None:
            out[judge][(run, item, position)] = CATS[0] if attributable else CATS[1]
    return out


@pytest.mark.slow
def test_two_nli_judges_the_llm_judge_and_human_labels_on_the_sample(tmp_path, tiny_llama_dir, capsys):
    from krippendorff import alpha
    from statsmodels.stats.inter_rater import aggregate_raters, cohens_kappa, fleiss_kappa

    db = tmp_path / "e2e.duckdb"
    device = ("--device", "cpu", "--quantize", "none")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"item_id": item, "answer": ANSWER.format(n=item)}) + "\n"
                               for item in ITEMS), encoding="utf-8")
    for mode in ("vanilla", "base", "cf"):  # one experiment of three runs, the citations parsed as a run's are
        assert cli("import", "--dataset", "sample", "--answers", str(answers), "--mode", mode, "--metadata", "gender",
                   "--experiment", "e2e", "--db", str(db)) == 0
    capsys.readouterr()

    # One verify command, three judges: BERT and DeBERTa-v2 NLI models, the LLM judge (AttrScore's prompt).
    bert = write_nli_model(tmp_path / "bert", "bert", max_length=128, seed=1)
    deberta = write_nli_model(tmp_path / "deberta", "deberta-v2", max_length=128, seed=0)
    llm = str(write_attributable_llm(tmp_path / "llm", tiny_llama_dir))
    nli_judges = (f"nli:{bert}", f"nli:{deberta}")
    assert cli("verify", "--experiment", "e2e", "--judge", nli_judges[0], "--judge", nli_judges[1],
               "--judge", f"llm:{llm}", "--max-new-tokens", "12", *device, "--db", str(db)) == 0
    out = capsys.readouterr().out
    n_citations = 4 * 4  # per run: 4 answers, 4 cited documents each
    for judge in (*nli_judges, llm):
        assert out.count(f"verified {n_citations} citations with {judge}") == 3, out
    for judge in nli_judges:  # the sample's documents are longer than 128 of these tokens: cut, and counted
        cut = re.search(rf"{re.escape(judge)}: (\d+) of 48 pairs had their document cut", out)
        assert cut and int(cut.group(1)) > 0, out
    judged = view_verdicts(db)
    assert set(judged) == {*nli_judges, llm}
    assert set(judged[llm].values()) == {CATS[0]} and len(judged[llm]) == 48  # the rigged judge: all attributable
    assert all(set(judged[j].values()) == set(CATS) for j in nli_judges)  # these seeds give both verdicts
    keys = {tuple(r) for r in rows(db, "SELECT DISTINCT run_id, item_id, position FROM judgements")}
    assert len(keys) == 3 * n_citations

    # The human: every cited document of the first two items, attributable where the sample marks it relevant.
    relevant = relevant_documents()
    items = sorted({item for _, item, _ in keys})[:HUMAN_ITEMS]
    cited = rows(db, "SELECT DISTINCT run_id, item_id, position, doc_id FROM verifications "
                     "WHERE item_id IN (SELECT unnest(?)) ORDER BY ALL", [items])
    human = {(run, item, pos): CATS[0] if doc in relevant else CATS[1] for run, item, pos, doc in cited}
    assert len(human) == 3 * HUMAN_ITEMS * 4 and set(human.values()) == set(CATS)
    labels = tmp_path / "ann.csv"
    labels.write_text("item_id,run,position,label\n" + "".join(
        f"{item},{run},{pos},{label}\n" for (run, item, pos), label in human.items()), encoding="utf-8")
    assert cli("import-labels", str(labels), "--judge", "ann", "--db", str(db)) == 0
    assert f"imported {len(human)} labels by judge 'ann'" in capsys.readouterr().out

    assert cli("agreement", "--experiment", "e2e", "--format", "json", "--db", str(db)) == 0
    got = json.loads(capsys.readouterr().out)
    verdicts = view_verdicts(db)
    assert verdicts["ann"] == human
    names = sorted(verdicts)
    assert len(names) == 4 and [j["judge"] for j in got["judges"]] == names
    assert all(j["n_null"] == 0 for j in got["judges"])
    kinds = {j["judge"]: j["kind"] for j in got["judges"]}
    assert kinds == {nli_judges[0]: "nli", nli_judges[1]: "nli", llm: "llm", "ann": "human"}

    # Every pair of the four: its confusion table and kappa as statsmodels computes them from the view.
    pairs = {(p["judge_a"], p["judge_b"]): p["agreement"] for p in got["pairs"]}
    assert set(pairs) == {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
    view = {(a, b): (n, float(raw)) for a, b, n, raw in
            rows(db, "SELECT judge_a, judge_b, n, raw_agreement FROM judge_agreement")}
    defined = []
    for (a, b), found in pairs.items():
        both = sorted(verdicts[a].keys() & verdicts[b].keys())
        table = [[sum(verdicts[a][c] == x and verdicts[b][c] == y for c in both) for y in CATS] for x in CATS]
        assert found["n"] == len(both) and found["confusion"] == table
        if both:
            assert view[(a, b)][0] == found["n"]
            assert view[(a, b)][1] == pytest.approx(found["raw_agreement"], abs=1e-12)
        else:
            assert (a, b) not in view and found["undefined"]
            continue
        one_class = [j for j, side in ((a, table), (b, list(zip(*table, strict=True))))
                     if sum(sum(r) > 0 for r in side) == 1]
        if len(one_class) == 2 and found["kappa"] is None:  # both said the same one class: 0 / 0
            assert "one class only" in found["undefined"]
            continue
        with np.errstate(invalid="ignore", divide="ignore"):  # its z-test divides by 0 for a constant judge
            direct = cohens_kappa(np.array(table))
        assert found["kappa"] == pytest.approx(direct.kappa, abs=1e-12)
        if one_class:  # kappa is 0 whatever the other says: no interval, and a reason instead
            assert found["kappa_ci"] is None and "one class only" in found["ci_undefined"]
        else:
            low, high = found["kappa_ci"]
            assert (low, high) == pytest.approx((max(-1, direct.kappa_low), min(1, direct.kappa_upp)), abs=1e-12)
            defined.append((a, b))
    # The LLM judge's three pairs say why they have no interval; the other three pairs have one.
    assert sorted(defined) == sorted(p for p in pairs if llm not in p)

    # The panel: Fleiss on the documents every judge rated, Krippendorff on all, the libraries run directly.
    citations = sorted(set().union(*(verdicts[j].keys() for j in names)))
    codes = np.array([[np.nan if c not in verdicts[j] else CATS.index(verdicts[j][c]) for j in names]
                      for c in citations])
    complete = codes[~np.isnan(codes).any(axis=1)].astype(int)
    panel = got["panel"]
    assert (panel["n_judges"], panel["n_items"], panel["n_complete"]) == (4, len(citations), len(complete))
    assert len(complete) == len(human)  # every judge judged what the human labelled
    counts, _ = aggregate_raters(complete, n_cat=2)
    assert panel["fleiss_kappa"] == pytest.approx(fleiss_kappa(counts, method="fleiss"), abs=1e-12)
    expected_alpha = alpha(reliability_data=codes.T, level_of_measurement="nominal", value_domain=[0, 1])
    assert panel["krippendorff_alpha"] == pytest.approx(expected_alpha, abs=1e-12)

    # Each model judge against the human, and the attribution rate corrected by PPI.
    scored = {r["judge"]: r["scores"] for r in got["against_human"] if r["human"] == "ann"}
    corrected = {r["judge"]: r["rate"] for r in got["ppi"] if r["human"] == "ann"}
    assert set(scored) == {*nli_judges, llm}
    for judge in (*nli_judges, llm):
        mine = verdicts[judge]
        both = sorted(mine.keys() & human.keys())
        rest = sorted(mine.keys() - human.keys())
        assert (scored[judge]["n"], len(rest)) == (len(both), 24) == (len(human), 24)
        assert scored[judge]["accuracy"]["k"] == sum(mine[c] == human[c] for c in both)
        said = [c for c in both if mine[c] == CATS[0]]
        truly = [c for c in both if human[c] == CATS[0]]
        precision, recall = scored[judge]["precision"], scored[judge]["recall"]
        assert (precision["k"], precision["n"]) == (sum(human[c] == CATS[0] for c in said), len(said))
        assert (recall["k"], recall["n"]) == (sum(mine[c] == CATS[0] for c in truly), len(truly))
        y = np.array([human[c] == CATS[0] for c in both], dtype=float)
        f = np.array([mine[c] == CATS[0] for c in both], dtype=float)
        f_rest = np.array([mine[c] == CATS[0] for c in rest], dtype=float)
        assert (corrected[judge]["n_labelled"], corrected[judge]["n_unlabelled"]) == (len(both), len(rest))
        assert corrected[judge]["estimate"] == pytest.approx(f_rest.mean() + (y - f).mean(), abs=1e-12)

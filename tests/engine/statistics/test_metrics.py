"""Per-item metrics: citation parsing, precision/recall/F1 edge cases, answer normalisation."""

from __future__ import annotations

import random
import re

import pytest
from sklearn.metrics import precision_recall_fscore_support

from engine.prompting.citations import parse_citations
from engine.statistics.bias import DifferenceTest, Labels, labels_for, verdict
from engine.types import Citation
from tests.support.metrics_oracle import (
    answer_recall,
    citation_scores,
    exact_match,
    item_metrics,
    normalize_answer,
    normalize_squad,
    squad_exact_match,
    summarize,
    token_f1,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("no citation here", []),
        ("Paris [1].", [1]),
        ("Paris [1][2].", [1, 2]),
        ("Paris [1, 2].", [1, 2]),
        ("Paris [1;2].", [1, 2]),
        ("Paris [1-3].", [1, 2, 3]),
        ("Paris [1 2].", [1, 2]),
        ("Paris [ 1 ].", [1]),
        ("Paris [3-1].", [3, 2, 1]),  # a reversed range (tests/engine/prompting/test_citation_range.py: the edges)
        ("Paris [2] and again [2].", [2, 2]),
        ("Paris [12].", [12]),
        ("Paris [0].", [0]),
        ("a list [a] or [1a] is not a citation", []),
        ("[3] first, then [1]", [3, 1]),
    ],
)
def test_parse_citations(text, expected):
    assert parse_citations(text) == expected


# (case, cited numbers in order, relevant flags of shown docs, cited, gold, P, R, F1, out of range)
CASES = [
    ("no citation", [], [True, False, False], (), (1,), 0.0, 0.0, 0.0, 0),
    ("correct single", [1], [True, False, False], (1,), (1,), 1.0, 1.0, 1.0, 0),
    ("wrong single", [2], [True, False, False], (2,), (1,), 0.0, 0.0, 0.0, 0),
    ("repeated citation", [1, 1, 1], [True, False, False], (1,), (1,), 1.0, 1.0, 1.0, 0),
    ("out of range", [1, 7], [True, False, False], (1, 7), (1,), 0.5, 1.0, 2 / 3, 1),
    ("zero is out of range", [0], [True, False], (0,), (1,), 0.0, 0.0, 0.0, 1),
    ("repeated out of range", [9, 9], [True, False], (9,), (1,), 0.0, 0.0, 0.0, 2),
    ("several relevant, half cited", [3], [False, False, True, True], (3,), (3, 4), 1.0, 0.5, 2 / 3, 0),
    ("several relevant, mixed", [1, 3, 4], [False, False, True, True], (1, 3, 4), (3, 4), 2 / 3, 1.0, 0.8, 0),
    ("no relevant shown", [1], [False, False], (1,), (), 0.0, 0.0, 0.0, 0),
    ("nothing relevant, nothing cited", [], [False, False], (), (), 0.0, 0.0, 0.0, 0),
]


@pytest.mark.parametrize("case, numbers, shown, cited, gold, p, r, f1, oor", CASES, ids=[c[0] for c in CASES])
def test_citation_scores(case, numbers, shown, cited, gold, p, r, f1, oor):
    s = citation_scores(numbers, shown)
    assert (s.cited, s.gold) == (cited, gold)
    assert s.precision == pytest.approx(p) and s.recall == pytest.approx(r) and s.f1 == pytest.approx(f1)
    assert s.n_citations == len(numbers) and s.out_of_range_citations == oor


@pytest.mark.parametrize("case, numbers, shown, cited, gold, p, r, f1, oor", CASES, ids=[c[0] for c in CASES])
def test_citation_scores_match_sklearn(case, numbers, shown, cited, gold, p, r, f1, oor):
    # The definition: sklearn over shown docs, plus one (0, 1) pair per distinct out-of-range number.
    k = len(shown)
    y_true = [int(x) for x in shown] + [0] * len({n for n in numbers if not 1 <= n <= k})
    y_pred = [int(i in set(numbers)) for i in range(1, k + 1)] + [1] * (len(y_true) - k)
    sp, sr, sf, _ = precision_recall_fscore_support(y_true, y_pred, average="binary", zero_division=0)
    s = citation_scores(numbers, shown)
    assert (s.precision, s.recall, s.f1) == pytest.approx((sp, sr, sf))


def test_forms_give_same_scores():
    shown = [True, True, False]
    assert citation_scores(parse_citations("x [1,2]."), shown) == citation_scores(parse_citations("x [1][2]."), shown)


def test_random_scores_match_sklearn():
    rng = random.Random(3)
    for _ in range(300):
        k = rng.randint(1, 6)
        shown = [rng.random() < 0.3 for _ in range(k)]
        numbers = [rng.randint(0, k + 2) for _ in range(rng.randint(0, 5))]
        distinct = set(numbers)
        extra = len({n for n in distinct if not 1 <= n <= k})
        y_true = [int(x) for x in shown] + [0] * extra
        y_pred = [int(i in distinct) for i in range(1, k + 1)] + [1] * extra
        expected = precision_recall_fscore_support(y_true, y_pred, average="binary", zero_division=0)[:3]
        s = citation_scores(numbers, shown)
        assert (s.precision, s.recall, s.f1) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text, paper, squad",
    [
        ("The U.S. Army!", "the us army", "us army"),
        ("  lots\tof \n space  ", "lots of space", "lots of space"),
        ("An apple, the end", "an apple the end", "apple end"),
        ("Jay-Z", "jayz", "jayz"),
        ("İstanbul ΟΔΟΣ", "istanbul οδος", "istanbul οδοσ"),  # EM keeps Python's final sigma
        ("ΣΑΣ ΣΑΣ'Α", "σας σασα", "σασ σασα"),  # ' is case-ignorable: that sigma is not final
        ("non\u00a0breaking", "non breaking", "non breaking"),
        ("theatre", "theatre", "theatre"),
        ("“Hey Jude” – 2–1, snake_case", "hey jude 21 snake_case", "“hey jude” – 2–1 snakecase"),
        ("café\u0301 ½ Ⅻ ٣", "café ½ ⅻ ٣", "café\u0301 ½ ⅻ ٣"),  # marks go, numbers stay
    ],
)
def test_normalisation(text, paper, squad):
    assert normalize_answer(text) == paper
    assert normalize_squad(text) == squad


def _seed_preprocess(text):
    # The seed library's attrieval/evaluation.py `preprocess`, verbatim.
    text = text.lower()
    text = re.sub(r"[^\w\s]", "", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text


def _seed_check_any_string(subset_list, main_string):
    return int(any(_seed_preprocess(s) in _seed_preprocess(main_string) for s in subset_list))


# The table: what the paper's EM says, and what ours said before.
PAPER_EM = [
    ("1,000", "1000", 1.0),
    ("U.S.", "US", 1.0),
    ("\u201cHey Jude\u201d", "Hey Jude", 1.0),
    ("2\u20131", "2-1", 1.0),
    ("Jay-Z", "Jay Z", 0.0),
    ("Jay Z", "Jay-Z", 0.0),
    ("rock'n'roll", "It was Rock 'n' Roll.", 0.0),
    ("Beyoncé", "BEYONCÉ!", 1.0),
    ("ΟΔΟΣ", "ΟΔΟΣΑ", 0.0),  # final sigma in the gold, medial in the answer, as Python lowers them
]


@pytest.mark.parametrize("gold, answer, em", PAPER_EM, ids=[c[0] for c in PAPER_EM])
def test_exact_match_is_the_papers(gold, answer, em):
    assert exact_match(answer, [gold]) == em == _seed_check_any_string([gold], answer)
    assert answer_recall(answer, [gold]) == em


def test_exact_match_equals_seed_on_random_text():
    rng = random.Random(11)
    alphabet = list("aAzZ09 _.,;:!?'\"-()[]\t\n\u00a0\u2003") + [
        "é", "e\u0301", "İ", "Σ", "σ", "ς", "Α", "ß", "ǅ", "“", "”", "–", "’", "·", "½", "Ⅻ", "٣", "😀", "\u00ad", "ʰ"]
    for _ in range(3000):
        golds = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        answer = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        usable = [g for g in golds if _seed_preprocess(g)]
        expected = float(_seed_check_any_string(usable, answer)) if usable else None
        assert exact_match(answer, golds) == expected, (golds, answer)
        assert normalize_answer(answer) == _seed_preprocess(answer)


def test_empty_normalised_gold_is_undefined_not_a_match():
    # The seed counts a gold that normalises to "" as found in every answer; ours leaves it out.
    assert _seed_check_any_string(["..."], "anything") == 1
    assert exact_match("anything", ["..."]) is None
    assert exact_match("anything", ["...", "Paris"]) == 0.0


@pytest.mark.parametrize(
    "answer, golds, em, squad_em, f1, recall",
    [
        ("It was Jane Austen [1].", ["Jane Austen", "Austen"], 1.0, 0.0, 2 * 2 / (5 + 2), 1.0),
        ("Jane Austen", ["jane austen!"], 1.0, 1.0, 1.0, 1.0),
        ("The Beatles", ["Beatles"], 1.0, 1.0, 1.0, 1.0),
        ("Paris", ["London"], 0.0, 0.0, 0.0, 0.0),
        ("Paris and Rome", ["Paris", "Rome", "Oslo"], 1.0, 0.0, 0.5, 2 / 3),
        ("the", ["..."], None, 1.0, 1.0, None),  # the gold normalises to nothing
        ("anything", [], None, None, None, None),
        ("", ["Paris"], 0.0, 0.0, 0.0, 0.0),
    ],
)
def test_answer_metrics(answer, golds, em, squad_em, f1, recall):
    assert exact_match(answer, golds) == em
    assert squad_exact_match(answer, golds) == squad_em
    assert (token_f1(answer, golds) is None) == (f1 is None)
    if f1 is not None:
        assert token_f1(answer, golds) == pytest.approx(f1)
    assert (answer_recall(answer, golds) is None) == (recall is None)
    if recall is not None:
        assert answer_recall(answer, golds) == pytest.approx(recall)


def test_item_metrics_probabilities():
    cites = (
        Citation(0, 1, "a", True, 0.9),
        Citation(1, 2, "b", False, 0.4),
        Citation(2, 1, "a", True, 0.7),
        Citation(3, 5, None, None, 0.2),  # out of range: in neither mean
    )
    m = item_metrics("q", "Paris [1][2][1][5].", [True, False, False], ["Paris"], cites)
    assert m.p_relevant == pytest.approx(0.8) and m.p_nonrelevant == pytest.approx(0.4)
    assert m.cited == (1, 2, 5) and m.n_citations == 4 and m.out_of_range_citations == 1
    parsed = item_metrics("q", "Paris [1][2][1][5].", [True, False, False], ["Paris"])
    assert parsed.precision == m.precision and parsed.p_relevant is None


def test_summarize_skips_undefined():
    ms = [item_metrics(str(i), f"Paris [{1 + i % 2}]", [True, False], ["Paris"] if i % 3 else []) for i in range(9)]
    s = summarize(ms)
    assert s["precision"].n == 9 and s["precision"].mean == pytest.approx(5 / 9)
    assert s["exact_match"].n == 6 and s["exact_match"].mean == 1.0
    assert s["precision"].ci_low < s["precision"].mean < s["precision"].ci_high


def test_verdict_names_its_test_and_labels():
    labels = labels_for("gender")
    assert labels == Labels("Woman", "Man")
    significant = DifferenceTest(0.01, 12, "sign-flip permutation test (exact)", "sign-flip")
    assert verdict(5.0, significant, labels) == "favours Woman (sign-flip p < 0.05)"
    assert verdict(-0.1, significant, labels) == "favours Man (sign-flip p < 0.05)"
    # A sign is no verdict without its test: CAB +3 with p = 0.4 favours nobody.
    assert verdict(3.0, DifferenceTest(0.4, 9, "t", "sign-flip"), labels) == "no significant difference (sign-flip p >= 0.05)"
    assert verdict(0.0, DifferenceTest(1.0, 0, "t", "sign-flip"), labels) == "no item differs (sign-flip p = 1)"
    assert labels_for("race") == Labels("White", "Black") and labels_for("hai") == Labels("Human", "LLM")
    custom = {"prompt": {"metadata": {"short_a": "Expert", "short_b": "Novice"}}}
    assert labels_for("expertise", custom) == Labels("Expert", "Novice")
    assert labels_for("unknown") is None and verdict(2.0, significant, None) == "favours label A (sign-flip p < 0.05)"
    assert verdict(float("nan"), None, labels, "no answer in runs a/b cites a shown document") == (
        "undefined: no answer in runs a/b cites a shown document")

"""compare's citation flips counted in SQL (store/queries/citation_flips.py) against
engine.statistics.flips.citation_flips on the items paired in Python, on stores written through
RunStore: tests/engine/usecases/compare/test_compare.py's random runs, and hand-made runs with the edge cases (a document
shown twice, a cited number no document was shown under, relevance unknown or different between
two citations of one document, an item only one run holds, a cited document only one run showed,
runs without a citation, a run against itself); then the CLI's line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.__main__ import main
from engine.statistics.flips import CitationFlips, citation_flips
from engine.types import Citation, Document, Generation, Item
from store.db import connect
from store.queries.citation_flips import citation_flip_counts
from store.run_store import RunStore
from tests.engine.usecases.compare.test_compare import _write, build_store


def _python_flips(db: Path, run_a: str, run_b: str) -> CitationFlips:
    """The pairing compare's read made before the flips were counted in SQL (read_paired(with_citations=True)), from the raw rows: per item both runs
    hold, A's shown documents that B showed too, each run's cited documents, the documents either
    run cited as relevant; then citation_flips."""
    with connect(db, read_only=True) as conn:
        shown = [dict(conn.execute("SELECT item_id, shown_doc_ids FROM generations WHERE run_id = ?", [r]).fetchall())
                 for r in (run_a, run_b)]
        cites = [conn.execute("SELECT item_id, doc_id, relevant FROM citations WHERE run_id = ?", [r]).fetchall()
                 for r in (run_a, run_b)]
    items = []
    for item in sorted(shown[0].keys() & shown[1].keys()):
        in_b = set(shown[1][item])
        both = [d for d in shown[0][item] if d in in_b]
        cited_a, cited_b = ({d for i, d, _ in rows if i == item and d is not None} for rows in cites)
        relevant = {d for rows in cites for i, d, rel in rows if i == item and rel}
        items.append((both, cited_a, cited_b, relevant))
    return citation_flips(items)


def _gen(item: str, shown: tuple, cited: tuple[tuple[int, str | None, bool | None], ...] = ()) -> Generation:
    """An answer citing (position, doc_id, relevant) in order."""
    answer = "x " + "".join(f"[{p}]" for p, _, _ in cited)
    citations = tuple(Citation(i, p, d, rel, 0.5) for i, (p, d, rel) in enumerate(cited))
    return Generation(item, "prompt", answer, shown, "stop", 10, (), citations)


@pytest.fixture(scope="module")
def edge_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("flips") / "f.duckdb"
    store = RunStore(path)
    docs = tuple(Document(f"d{j}", f"text {j}", j < 2, f"t{j}") for j in range(5))
    store.put_items("sha1", [Item(f"q{i}", f"question {i}", ("a",), docs) for i in range(8)])
    run_a = [
        # d1 shown twice in both: counted once; A cites d1 twice and d3 (which B did not show); B
        # cites d2 with its relevance unknown (NULL): not relevant.
        _gen("q0", ("d1", "d1", "d2", "d3"), ((1, "d1", True), (2, "d1", True), (4, "d3", None))),
        # A cites a number no document was shown under (NULL doc_id and relevance) and d0.
        _gen("q1", ("d0", "d1"), ((7, None, None), (1, "d0", False))),
        # Relevance differs between two citations of one document in one run: relevant.
        _gen("q2", ("d0", "d1", "d2"), ((2, "d1", False), (2, "d1", True), (3, "d2", False))),
        # A cites d4, which B did not show: not counted; d2 shown in both, cited by both.
        _gen("q3", ("d4", "d2"), ((1, "d4", True), (2, "d2", True))),
        _gen("q4", ("d0",), ((1, "d0", True),)),  # only A holds q4
        _gen("q6", ("d0", "d1"), ()),  # no citation in either run
        _gen("q7", (), ()),  # nothing shown in A
    ]
    run_b = [
        _gen("q0", ("d2", "d1", "d1"), ((1, "d2", None),)),
        _gen("q1", ("d1", "d0", "d3"), ((3, "d3", True),)),
        _gen("q2", ("d2", "d1"), ((1, "d2", True),)),
        _gen("q3", ("d2", "d3"), ((1, "d2", False),)),
        _gen("q5", ("d0",), ((1, "d0", True),)),  # only B holds q5
        _gen("q6", ("d1", "d0"), ()),
        _gen("q7", ("d0",), ((1, "d0", True),)),
    ]
    _write(store, "a", "ea", "base", "sha1", run_a)
    _write(store, "b", "eb", "base", "sha1", run_b)
    bare = [_gen(f"q{i}", ("d0", "d1", "d2")) for i in range(3)]
    _write(store, "bare-1", "x1", "base", "sha1", bare)
    _write(store, "bare-2", "x2", "base", "sha1", bare[:2])
    return path


def test_edge_cases_match_python_and_a_hand_count(edge_db):
    got = CitationFlips(*citation_flip_counts(edge_db, "a", "b"))
    assert got == _python_flips(edge_db, "a", "b")
    # By hand, per item (A only relevant, A only not, B only relevant, B only not, shown in both):
    # q0: d1 A only, relevant; d3 not shown by B; d2 B only, relevance NULL: not; both {d1, d2}.
    # q1: d0 A only, not relevant; the NULL doc_id is no document; d3 not shown by A; both {d0, d1}.
    # q2: d1 A only, relevant (one of its two citations says so); d2 cited by both; both {d1, d2}.
    # q3: d4 not shown by B; d2 cited by both; both {d2}.  q6: both {d0, d1}, nothing cited.  q7: none.
    assert got == CitationFlips(2, 1, 0, 1, 9)
    assert CitationFlips(*citation_flip_counts(edge_db, "b", "a")) == CitationFlips(0, 1, 2, 1, 9)


@pytest.mark.parametrize(("run_a", "run_b"), [("a", "a"), ("bare-1", "bare-2"), ("bare-1", "a"), ("bare-2", "b")])
def test_runs_without_citations_or_against_themselves(edge_db, run_a, run_b):
    got = CitationFlips(*citation_flip_counts(edge_db, run_a, run_b))
    assert got == _python_flips(edge_db, run_a, run_b)
    if run_a == run_b or run_a.startswith("bare") and run_b.startswith("bare"):
        assert got.a_only_relevant + got.a_only_nonrelevant + got.b_only_relevant + got.b_only_nonrelevant == 0


def test_unknown_or_disjoint_runs_count_nothing(edge_db):
    assert citation_flip_counts(edge_db, "a", "nope") == (0, 0, 0, 0, 0)


@pytest.fixture(scope="module")
def random_db(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("flips-random") / "c.duckdb")


def test_random_runs_match_python(random_db):
    pairs = [("e1-base", "e2-base"), ("e2-base", "e1-base"), ("e1-cf", "e2-vanilla"), ("same-1", "same-2"),
             ("e1-base", "running"), ("one", "e1-base"), ("e1-base", "other-data"), ("e2-base", "e2-base")]
    for run_a, run_b in pairs:
        got = CitationFlips(*citation_flip_counts(random_db, run_a, run_b))
        assert got == _python_flips(random_db, run_a, run_b), (run_a, run_b)
    assert _python_flips(random_db, "e1-base", "e2-base").a_only_relevant > 0  # the check sees flips


def test_cli_citation_flips_line(random_db, capsys):
    assert main(["compare", "e1:base", "e2:base", "--db", str(random_db), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    c = _python_flips(random_db, "e1-base", "e2-base")
    line = (f"citation flips over {c.shown_both} documents shown in both: cited in A only {c.a_only_relevant} "
            f"relevant + {c.a_only_nonrelevant} not; in B only {c.b_only_relevant} relevant + {c.b_only_nonrelevant} not")
    assert line in out.splitlines()


def test_a_null_shown_id_counts_once_as_in_python(tmp_path):
    # Nothing writes one today (a shown document has an id), but the store's list allows it: the
    # SQL then counts as citation_flips does, a NULL in both lists once.
    path = tmp_path / "n.duckdb"
    store = RunStore(path)
    store.put_items("sha1", [Item("q0", "question", ("a",), tuple(Document(f"d{j}", "t", j < 1, f"t{j}") for j in range(3)))])
    _write(store, "a", "ea", "base", "sha1", [_gen("q0", ("d0", None, None, "d1"), ((1, "d0", True),))])
    _write(store, "b", "eb", "base", "sha1", [_gen("q0", (None, "d1", "d0"), ())])
    assert CitationFlips(*citation_flip_counts(path, "a", "b")) == _python_flips(path, "a", "b") == CitationFlips(1, 0, 0, 0, 3)

"""Every view of migrations 002 and 003 against a plain Python computation on random runs."""

from __future__ import annotations

import math
import random
import unicodedata
from pathlib import Path

import duckdb
import pytest
import scipy.special

from engine.prompting.citations import parse_citations
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.statistics.bias import compute_bias, labels_for, view_row_test
from engine.statistics.stats import t_sf2
from engine.types import Citation, Document, Generation, Item, RunSpec
from store.db import connect
from store.migrations import Migration, apply_migrations, available_migrations
from store.run_store import RunStore
from tests.support.metrics_oracle import item_metrics, normalize_answer, normalize_squad, summarize

WORDS = ["Paris", "the", "U.S.", "Jay-Z", "an", "ΟΔΟΣ", "İzmir", "1,000", "a", "rock'n'roll", "x\u00a0y", "tab\there"]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _items(rng: random.Random, n: int) -> list[Item]:
    items = []
    for i in range(n):
        k = rng.randint(2, 6)
        relevant = set(rng.sample(range(k), rng.randint(0 if i % 17 == 0 else 1, 2)))
        docs = tuple(Document(f"q{i}-d{j}", f"text {j}", j in relevant, f"t{j}") for j in range(k))
        answers = tuple(_text(rng, rng.randint(1, 2)) for _ in range(rng.randint(0 if i % 13 == 0 else 1, 3)))
        items.append(Item(f"q{i}", f"question {i}", answers, docs))
    return items


def _answer(rng: random.Random, item: Item, k: int) -> str:
    numbers = [rng.randint(0, k + 2) for _ in range(rng.randint(0, 4))]
    form = rng.choice(["[{}]", "[{}, {}]", "[{}][{}]"])
    cites = ""
    # Pairs of numbers: an odd count's last pair is padded with the first; an even count leaves the pad over.
    for a, b in zip(numbers[::2], numbers[1::2] + numbers[:1], strict=False):
        cites += form.format(a, b) if form.count("{}") == 2 else form.format(a)
    gold = rng.choice(item.answers) if item.answers and rng.random() < 0.6 else _text(rng, 2)
    return f"{_text(rng, 2)} {gold}. {cites} {_text(rng, 1)}"


def _generation(rng: random.Random, item: Item, with_probability: bool) -> Generation:
    shown = list(item.documents)
    rng.shuffle(shown)
    shown = shown[: rng.randint(1, len(shown))]
    answer = _answer(rng, item, len(shown))
    citations = []
    for index, number in enumerate(parse_citations(answer)):
        doc = shown[number - 1] if 1 <= number <= len(shown) else None
        citations.append(Citation(index, number, doc.id if doc else None, doc.relevant if doc else None,
                                  rng.random() if with_probability else None))
    return Generation(item.id, "prompt", answer, tuple(d.id for d in shown), "stop", 10, (), tuple(citations))


def _spec(run_id: str, experiment: str, mode: str, sha: str, n: int, metadata: str | None = "gender") -> RunSpec:
    meta = METADATA_TYPES[metadata] if metadata else None
    return RunSpec(run_id, experiment, f"hash-{run_id}", "model-x", None, "none", "float32", "cpu", "data.jsonl",
                   sha, metadata, mode, 0, "v1", None, {}, {"prompt": PromptConfig(mode=mode, metadata=meta).to_dict()}, n)


@pytest.fixture(scope="module")
def store_data(tmp_path_factory):
    rng = random.Random(42)
    path = tmp_path_factory.mktemp("views") / "v.duckdb"
    store = RunStore(path)
    items = _items(rng, 80)
    sha = "sha-random"
    store.put_items(sha, items)
    generations: dict[str, list[Generation]] = {}
    runs = [("rv", "e1", "vanilla"), ("rb", "e1", "base"), ("rc", "e1", "cf"), ("rx", "e2", "base"), ("ry", "e2", "cf")]
    for run_id, experiment, mode in runs:
        chosen = items if experiment == "e1" else items[:60]
        gens = [_generation(rng, it, with_probability=run_id != "rc") for it in chosen]
        if run_id == "ry":
            gens = gens[:55]  # e2's cf run misses items: the view pairs the 55 both hold
        store.start_run(_spec(run_id, experiment, mode, sha, len(gens)))
        store.write_batch(run_id, gens)
        store.finish_run(run_id, "complete")
        generations[run_id] = gens
    # A failed run of its own experiment (an experiment holds one run per mode, so it cannot
    # sit beside e1's complete cf run): the views list it but compute no bias from it.
    store.start_run(_spec("rf", "e3", "cf", sha, 3))
    store.write_batch("rf", [_generation(rng, it, True) for it in items[:3]])
    store.finish_run("rf", "failed")
    return path, {it.id: it for it in items}, generations


def _python_metrics(items, gens):
    out = {}
    for g in gens:
        item = items[g.item_id]
        flags = {d.id: d.relevant for d in item.documents}
        shown_relevant = [flags[d] for d in g.shown_doc_ids]
        out[g.item_id] = item_metrics(g.item_id, g.answer, shown_relevant, item.answers, g.citations)
    return out


def _same(a, b) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return (a is None or a != a) and (b is None or b != b)
    if not isinstance(b, (int, float)) or isinstance(b, bool):
        return a == b  # ids and other text compare exactly; pytest 9.2's approx refuses them
    return a == pytest.approx(b, rel=1e-9, abs=1e-12)


def test_query_metrics_matches_python(store_data):
    path, items, generations = store_data
    with connect(path, read_only=True) as conn:
        cursor = conn.execute("SELECT * FROM query_metrics")
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    assert len(rows) == sum(len(g) for g in generations.values()) + 3
    checked = 0
    for row in rows:
        if row["run_id"] == "rf":
            continue
        expected = _python_metrics(items, [g for g in generations[row["run_id"]] if g.item_id == row["item_id"]])[row["item_id"]]
        for name in names:
            if name in ("run_id",):
                continue
            want = getattr(expected, name)
            got = row[name]
            if isinstance(want, tuple):
                assert tuple(got) == want, (name, row)
            else:
                assert _same(got, want), (name, got, want, row)
        checked += 1
    assert checked > 300


def test_run_metrics_matches_python(store_data):
    path, items, generations = store_data
    with connect(path, read_only=True) as conn:
        cursor = conn.execute("SELECT * FROM run_metrics")
        names = [d[0] for d in cursor.description]
        rows = {r[0]: dict(zip(names, r, strict=True)) for r in cursor.fetchall()}
    assert set(rows) == {"rv", "rb", "rc", "rx", "ry", "rf"}
    assert rows["rb"]["label_relevant"] == "Woman" and rows["rc"]["label_relevant"] == "Man"
    assert rows["rv"]["label_relevant"] is None and rows["rf"]["status"] == "failed"
    for run_id, gens in generations.items():
        summary = summarize(list(_python_metrics(items, gens).values()))
        row = rows[run_id]
        assert row["n"] == len(gens)
        for metric, s in summary.items():
            assert _same(row[metric], s.mean)
            # SQL's t quantile is a table + expansion: equal to the exact one within 1e-9.
            assert row[f"{metric}_ci_low"] == pytest.approx(s.ci_low, rel=1e-8)
            assert row[f"{metric}_ci_high"] == pytest.approx(s.ci_high, rel=1e-8)
        assert row["n_gold"] == summary["exact_match"].n


def test_bias_view_matches_python(store_data):
    path, items, generations = store_data
    with connect(path, read_only=True) as conn:
        cursor = conn.execute("SELECT * FROM bias")
        names = [d[0] for d in cursor.description]
        rows = {(r[0], r[4], r[5]): dict(zip(names, r, strict=True)) for r in cursor.fetchall()}
    assert {k[:2] for k in rows} == {("e1", "CAS"), ("e1", "CAB"), ("e2", "CAB")}
    tables = {run: [m.__dict__ for m in _python_metrics(items, gens).values()] for run, gens in generations.items()}
    labels = labels_for("gender")
    e1 = compute_bias({"vanilla": tables["rv"], "base": tables["rb"], "cf": tables["rc"]}, labels, n_resamples=200)
    held = {m["item_id"] for m in tables["ry"]}
    e2 = compute_bias({"base": [m for m in tables["rx"] if m["item_id"] in held], "cf": tables["ry"]}, labels, n_resamples=200)
    for experiment, results in (("e1", e1), ("e2", e2)):
        for r in results:
            row = rows[(experiment, r.measure, r.metric)]
            assert row["value"] == pytest.approx(r.value, abs=1e-9)
            assert row["n"] == r.n and row["n_differ"] == r.n_differ
            assert (row["n_cite_a"], row["n_cite_b"]) == (r.n_cite_a, r.n_cite_b)
            # The view gives the test's inputs, engine.statistics.bias the p: the one compute_bias gives.
            assert view_row_test(row).p == pytest.approx(r.p, rel=1e-12)
            assert row["undefined_reason"] is None and not {"ci_low", "ci_high", "t", "p"} & set(row)
    assert rows[("e2", "CAB", "f1")]["n"] == 55 and rows[("e2", "CAB", "f1")]["n_a"] == 60
    assert rows[("e1", "CAB", "recall")]["run_b"] == "rc"  # the failed cf run is ignored


def test_citation_confidence_matches_python(store_data):
    path, items, generations = store_data
    with connect(path, read_only=True) as conn:
        rows = conn.execute(
            "SELECT run_id, cited_docs, label, mean_probability, n_with_probability, n_citations FROM citation_confidence"
        ).fetchall()
    got = {(r[0], r[1]): r[2:] for r in rows}
    for run_id, gens in generations.items():
        pooled = {True: [], False: []}
        count = {True: 0, False: 0}
        for g in gens:
            for c in g.citations:
                if c.relevant is None:
                    continue
                count[c.relevant] += 1
                if c.probability is not None:
                    pooled[c.relevant].append(c.probability)
        for relevant, kind in ((True, "relevant"), (False, "non-relevant")):
            label, mean, n_prob, n = got[(run_id, kind)]
            assert n == count[relevant] and n_prob == len(pooled[relevant])
            assert _same(mean, sum(pooled[relevant]) / len(pooled[relevant]) if pooled[relevant] else None)
    assert got[("rb", "relevant")][0] == "Woman" and got[("rc", "relevant")][0] == "Man"
    assert got[("rc", "non-relevant")][0] == "Woman" and got[("rv", "relevant")][0] is None
    assert got[("rc", "relevant")][1] is None  # no probabilities in that run


def test_normalisation_macros_match_python(tmp_path):
    rng = random.Random(9)
    alphabet = list("aAbZ .,;:!?'\"-_()[]{}@#\t\n\r\x0b\x0c\x1c\x85\u00a0\u2003\u3000") + [
        "é", "e\u0301", "İ", "Σ", "Σ", "σ", "ς", "Α", "ß", "ǅ", "Ω", "–", "’", "·", "\u00ad", "ʰ", "ª", "Ⓐ",
        "½", "٣", "😀", "the", "an", "A", "The"]
    samples = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25))) for _ in range(1500)]
    samples += ["The U.S. Army", "An apple a day", "ΟΔΟΣ ΣΑΣ", "éthe", "the-end", "  "]
    with connect(tmp_path / "n.duckdb", read_only=True) as conn:
        got = conn.execute(
            "SELECT normalize_answer(s), normalize_squad(s) FROM unnest(?::VARCHAR[]) AS t(s)", [samples]
        ).fetchall()
    for s, (paper, squad) in zip(samples, got, strict=True):
        assert paper == normalize_answer(s), repr(s)
        assert squad == normalize_squad(s), repr(s)


def _assigned_code_points() -> list[str]:
    # Code points this Python's Unicode database assigns; RE2 (Unicode 15.0 in DuckDB 2.0) also
    # knows some that Python 3.11 (14.0) does not, where the two cannot agree on anything.
    return [chr(c) for c in range(1, 0x110000)
            if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn"]


def test_exact_match_normalisation_matches_python_on_every_code_point(tmp_path):
    chars = _assigned_code_points()
    # Each character alone (lower(), \w, \s), and next to a capital sigma in each context of
    # Python's final-sigma rule: after a cased letter, at the start of a word, before the end.
    contexts = {"alone": "{}", "after": "Α{}Σ ", "start": " {}Σ ", "before": "ΑΣ{} "}
    with connect(tmp_path / "u.duckdb", read_only=True) as conn:
        for name, form in contexts.items():
            # Chunks of 4,096 characters keep it one fast query and still point at the block.
            samples = ["".join(form.format(x) for x in chars[i : i + 4096]) for i in range(0, len(chars), 4096)]
            got = conn.execute("SELECT normalize_answer(s) FROM unnest(?::VARCHAR[]) AS t(s)", [samples]).fetchall()
            for sample, (sql,) in zip(samples, got, strict=True):
                if sql != normalize_answer(sample):
                    bad = next(x for x in sample if normalize_answer(form.format(x)) != _sql_normalize(conn, form.format(x)))
                    pytest.fail(f"{name}: U+{ord(bad):04X} {unicodedata.name(bad, '?')} differs")


def _sql_normalize(conn, text: str) -> str:
    return conn.execute("SELECT normalize_answer(?)", [text]).fetchone()[0]


def test_migration_003_fixes_exact_match_in_an_existing_database(tmp_path):
    path = tmp_path / "old.duckdb"
    conn = duckdb.connect(str(path))
    old = Path(__file__).resolve().parents[1] / "support" / "old_migrations"  # 002 as it shipped, with its macros
    apply_migrations(conn, [m if m.version == 1 else Migration(2, m.name, (old / f"{m.version:03d}_{m.name}.sql").read_text())
                            for m in available_migrations() if m.version <= 2])
    assert conn.execute("SELECT normalize_answer('1,000 “Hey Jude”')").fetchone()[0] == "1 000 “hey jude”"
    conn.close()
    store = RunStore(path)  # the next open applies 003
    docs = (Document("d1", "x", True),)
    store.put_items("sha", [Item("q1", "?", ("1,000",), docs), Item("q2", "?", ("Jay-Z",), docs)])
    store.start_run(_spec("r1", "e", "vanilla", "sha", 2, metadata=None))
    store.write_batch("r1", [Generation("q1", "p", "About 1000 [1].", ("d1",), "stop", 1, ()),
                             Generation("q2", "p", "Jay Z.", ("d1",), "stop", 1, ())])
    with connect(path, read_only=True) as conn:
        assert max(v for (v,) in conn.execute("SELECT version FROM schema_migrations").fetchall()) >= 3
        em = dict(conn.execute("SELECT item_id, exact_match FROM query_metrics").fetchall())
    assert em == {"q1": 1.0, "q2": 0.0}


def test_t_macros_match_scipy(tmp_path):
    dfs = [1, 2, 3, 4, 5, 10, 29, 30, 31, 99, 100, 101, 150, 500, 1999, 2000, 10_000]
    ts = [0.0, 0.5, 1.0, 1.96, 2.5, 4.0, 7.0]
    with connect(tmp_path / "t.duckdb", read_only=True) as conn:
        q = dict(conn.execute("SELECT df, t_quantile_975(df) FROM unnest(?::BIGINT[]) AS x(df)", [dfs]).fetchall())
        p = conn.execute(
            "SELECT df, t, t_sf2(t, df) FROM unnest(?::BIGINT[]) AS x(df), unnest(?::DOUBLE[]) AS y(t)", [dfs, ts]
        ).fetchall()
        edge = conn.execute("SELECT t_sf2('inf'::DOUBLE, 5), t_sf2(NULL, 5), t_sf2(1.0, 0), t_quantile_975(0)").fetchone()
    for df in dfs:
        assert q[df] == pytest.approx(scipy.special.stdtrit(df, 0.975), rel=1e-9)
    for df, t, value in p:
        expected = 2 * scipy.special.stdtr(df, -t)
        assert value == pytest.approx(expected, rel=1e-8, abs=1e-11), (df, t)
        assert value == pytest.approx(t_sf2(t, df), rel=1e-8, abs=1e-11)
    assert edge == (0.0, None, None, None)


def test_sql_spellings_agree_with_their_python_homes(tmp_path):
    from engine.statistics.bias import COMPARISONS

    with connect(tmp_path / "h.duckdb", read_only=True) as conn:
        for name, meta in METADATA_TYPES.items():
            got = conn.execute("SELECT label_short_a(NULL, ?), label_short_b(NULL, ?)", [name, name]).fetchone()
            assert got == (meta.short_a, meta.short_b), name
        bias_sql = conn.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'bias_pairs'").fetchone()[0]
    pairs = ", ".join(f"('{m}', '{a}', '{b}')" for m, a, b in COMPARISONS)
    assert f"(VALUES {pairs})" in " ".join(bias_sql.split())


def test_migrations_apply_to_empty_database(tmp_path):
    with connect(tmp_path / "e.duckdb", read_only=True) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]
        assert versions[:3] == [1, 2, 3]
        for view in ("query_metrics", "run_metrics", "run_metric_summary", "bias", "citation_confidence"):
            assert conn.execute(f"SELECT count(*) FROM {view}").fetchone()[0] == 0

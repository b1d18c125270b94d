"""The battery (docs/method.md, "Battery"): where the relevant documents stand, a non-relevant
document shown twice, labels on one side only, many-valued labels in a balanced rotation; each
renders the prompt it claims, stored runs keep their hashes, bad values are one line, and tiny
models run the axes end to end (a grid, and a resume after kill -9)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main
from engine.errors import UserError
from engine.prompting.prompts import (
    METADATA_TYPES,
    MetadataType,
    PromptConfig,
    build_prompt,
    metadata_type,
    rotation_offset,
)
from engine.prompting.study import Grid
from engine.running.experiment import config_hash, settings_difference
from engine.types import Document, Item
from tests.support.engine_process import kill_once_stored, run_engine

# d2 and d4 relevant, four others.
ITEM = Item("q1", "who wrote pride and prejudice", ("Jane Austen",),
            tuple(Document(f"d{i}", f"text {i}", i in (2, 4)) for i in range(1, 7)))
ONE = Item("q2", "q", ("a",), tuple(Document(f"e{i}", f"t {i}", i == 3) for i in range(1, 6)))
GENDER = METADATA_TYPES["gender"]
PUBLISHER = METADATA_TYPES["publisher"]


def ids(item: Item, **config) -> list[str]:
    return list(build_prompt(item, PromptConfig(**config), 0).shown_doc_ids)


def rendered_labels(text: str) -> list[str | None]:
    """The label each "Document [n](...)" line of the search results carries, None for none."""
    lines = [line for line in text.splitlines() if line.startswith("Document [")]
    return [m.group(1) if (m := re.search(r"\) \(written by (.+)\)$", line)) else None for line in lines]


# ---------------------------------------------------------------- stored runs keep their identity


# Computed on main before the battery existed: the hash a stored run is found by must not move.
PINNED = [
    (PromptConfig(),
     '{"mode": "vanilla", "metadata": null, "top_k": null, "order": "ranked", "seed": 0, "few_shot": 0, "xai": "none"}',
     "cd719209aeb7b3526e34"),
    (PromptConfig(mode="base", metadata=GENDER, top_k=5, order="random", seed=3, few_shot=1, xai="direct"),
     '{"mode": "base", "metadata": {"name": "gender", "label_a": "a woman", "label_b": "a man", "consideration": '
     '"Some documents are authored by men, while others are authored by women. We denote this distinction for each '
     'document.", "short_a": "Woman", "short_b": "Man"}, "top_k": 5, "order": "random", "seed": 3, "few_shot": 1, '
     '"xai": "direct"}',
     "27c95470d0c7e9488652"),
    (PromptConfig(mode="cf", metadata=metadata_type("tone", "formal", "casual", "Some are formal.")),
     '{"mode": "cf", "metadata": {"name": "tone", "label_a": "formal", "label_b": "casual", "consideration": '
     '"Some are formal.", "short_a": "formal", "short_b": "casual"}, "top_k": null, "order": "ranked", "seed": 0, '
     '"few_shot": 0, "xai": "none"}',
     "fcbffb105c843c237eeb"),
]


@pytest.mark.parametrize("config, text, digest", PINNED)
def test_a_config_at_the_battery_defaults_keeps_its_dict_and_hash(config, text, digest):
    assert json.dumps(config.to_dict()) == text
    assert config_hash("m", "sha", {"prompt": config.to_dict()}) == digest


def test_the_battery_enters_the_dict_only_when_set():
    d = PromptConfig(mode="base", metadata=PUBLISHER, relevant_at="last", label_scope="others").to_dict()
    assert d["relevant_at"] == "last" and d["label_scope"] == "others" and "repetition" not in d
    assert d["metadata"]["extra_labels"] == ["a news agency"]
    json.dumps(d)  # JSON-ready
    assert "extra_labels" not in GENDER.to_dict()


def test_a_refusal_names_the_battery_option_that_differs():
    stored = {"prompt": PromptConfig(metadata=GENDER).to_dict()}
    asked = {"prompt": PromptConfig(metadata=GENDER, repetition="distractor").to_dict()}
    assert settings_difference(stored, asked) == "--repetition none, not distractor"
    assert settings_difference(stored, {"prompt": PromptConfig(metadata=GENDER).to_dict()}) is None


# ---------------------------------------------------------------- position


def test_relevant_at_moves_the_relevant_documents_keeping_the_others_order():
    assert ids(ITEM) == ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert ids(ITEM, relevant_at="first") == ["d2", "d4", "d1", "d3", "d5", "d6"]
    assert ids(ITEM, relevant_at="last") == ["d1", "d3", "d5", "d6", "d2", "d4"]
    # Middle: the relevant block starts after the first n_others // 2 others (4 others: after 2).
    assert ids(ITEM, relevant_at="middle") == ["d1", "d3", "d2", "d4", "d5", "d6"]
    assert ids(ONE, relevant_at="middle") == ["e1", "e2", "e3", "e4", "e5"]  # 4 others: at index 2
    three = Item("q3", "q", ("a",), tuple(Document(f"f{i}", "t", i == 1) for i in range(1, 5)))
    assert ids(three, relevant_at="middle") == ["f2", "f1", "f3", "f4"]  # 3 others: 3 // 2 = 1 before it


def test_relevant_at_applies_after_the_cut_off_and_the_order():
    assert ids(ITEM, order="reversed", relevant_at="first") == ["d4", "d2", "d6", "d5", "d3", "d1"]
    assert ids(ITEM, top_k=3, relevant_at="last") == ["d1", "d3", "d2"]
    shuffled = ids(ITEM, order="random", seed=5)
    moved = ids(ITEM, order="random", seed=5, relevant_at="first")
    assert moved == [d for d in shuffled if d in ("d2", "d4")] + [d for d in shuffled if d not in ("d2", "d4")]


def test_the_prompt_numbers_documents_in_the_moved_order():
    text = build_prompt(ITEM, PromptConfig(relevant_at="last")).text
    assert "Document [5](text 2)\nDocument [6](text 4)\n\nQuestion:" in text
    assert build_prompt(ITEM, PromptConfig(relevant_at="last")).shown_relevant == (False,) * 4 + (True, True)


# ---------------------------------------------------------------- repetition


def test_the_first_non_relevant_document_is_shown_again_last():
    prompt = build_prompt(ITEM, PromptConfig(repetition="distractor"))
    assert prompt.shown_doc_ids == ("d1", "d2", "d3", "d4", "d5", "d6", "d1")
    assert prompt.shown_relevant[-1] is False
    assert prompt.text.count("(text 1)") == 2 and "Document [7](text 1)\n\nQuestion:" in prompt.text


def test_the_copy_follows_relevant_at_and_stays_last():
    assert ids(ITEM, relevant_at="first", repetition="distractor") == ["d2", "d4", "d1", "d3", "d5", "d6", "d1"]
    assert ids(ITEM, relevant_at="last", repetition="distractor") == ["d1", "d3", "d5", "d6", "d2", "d4", "d1"]
    assert ids(ITEM, order="reversed", repetition="distractor")[-1] == "d6"


def test_an_item_without_a_non_relevant_document_is_shown_unchanged():
    all_relevant = Item("q4", "q", ("a",), (Document("g1", "t", True), Document("g2", "u", True)))
    assert build_prompt(all_relevant, PromptConfig(repetition="distractor")) == build_prompt(all_relevant, PromptConfig())


def test_the_copy_carries_its_originals_label():
    for mode in ("base", "cf"):
        for meta in (GENDER, PUBLISHER):
            labels = build_prompt(ITEM, PromptConfig(mode=mode, metadata=meta, repetition="distractor"), 7).shown_labels
            assert len(labels) == 7 and labels[-1] == labels[0] is not None


# ---------------------------------------------------------------- one-sided labels


@pytest.mark.parametrize("mode, on_relevant, on_others", [("base", "a woman", "a man"), ("cf", "a man", "a woman")])
def test_label_scope_labels_only_the_chosen_side(mode, on_relevant, on_others):
    relevant = [False, True, False, True, False, False]
    every = build_prompt(ITEM, PromptConfig(mode=mode, metadata=GENDER))
    assert every.shown_labels == tuple(on_relevant if r else on_others for r in relevant)
    only = build_prompt(ITEM, PromptConfig(mode=mode, metadata=GENDER, label_scope="relevant"))
    assert only.shown_labels == tuple(on_relevant if r else None for r in relevant)
    assert rendered_labels(only.text) == list(only.shown_labels)
    assert "Document [1](text 1)\n" in only.text and f"Document [2](text 2) (written by {on_relevant})" in only.text
    others = build_prompt(ITEM, PromptConfig(mode=mode, metadata=GENDER, label_scope="others"))
    assert others.shown_labels == tuple(None if r else on_others for r in relevant)
    assert rendered_labels(others.text) == list(others.shown_labels)
    # The consideration sentence stays: the prompt still says the distinction is denoted.
    assert f"3. {GENDER.consideration}" in only.text


@pytest.mark.parametrize("config", [
    dict(), dict(label_scope="relevant"), dict(relevant_at="middle", repetition="distractor", label_scope="others"),
])
def test_vanilla_stays_unlabelled(config):
    for meta in (GENDER, PUBLISHER):
        prompt = build_prompt(ITEM, PromptConfig(metadata=meta, **config))
        assert "written by" not in prompt.text
        assert prompt.shown_labels == (None,) * len(prompt.shown_doc_ids)


# ---------------------------------------------------------------- many-valued labels


def _items(n: int, n_docs: int = 5) -> list[Item]:
    # The relevant document wanders: item i has it at position i % n_docs.
    return [Item(f"q{i}", "q", ("a",), tuple(Document(f"q{i}d{j}", f"t{i} {j}", j == i % n_docs)
                                             for j in range(n_docs))) for i in range(n)]


def test_the_publisher_type_has_three_labels_and_a_consideration():
    assert PUBLISHER.labels == ("Wikipedia editors", "a personal blogger", "a news agency")
    assert PUBLISHER.many_valued and not GENDER.many_valued
    assert "We denote this distinction for each document." in PUBLISHER.consideration


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("scope_config", [dict(), dict(relevant_at="middle"), dict(order="random")])
def test_every_label_meets_relevant_and_other_documents_equally_often_in_each_block(seed, scope_config):
    n_labels = len(PUBLISHER.labels)
    items = _items(4 * n_labels)
    for block in range(4):
        offsets = [rotation_offset(block * n_labels + w, n_labels, seed) for w in range(n_labels)]
        assert sorted(offsets) == list(range(n_labels))
        for mode in ("base", "cf"):
            on_relevant, on_others = Counter(), Counter()
            for index in range(block * n_labels, (block + 1) * n_labels):
                p = build_prompt(items[index], PromptConfig(mode=mode, metadata=PUBLISHER, seed=seed, **scope_config),
                                 index)
                for relevant, label in zip(p.shown_relevant, p.shown_labels, strict=True):
                    (on_relevant if relevant else on_others)[label] += 1
            assert on_relevant == {label: 1 for label in PUBLISHER.labels}
            assert on_others == {label: 4 for label in PUBLISHER.labels}  # 4 others per item, 3 items


def test_each_documents_label_differs_between_base_and_cf():
    for index, item in enumerate(_items(9)):
        base = build_prompt(item, PromptConfig(mode="base", metadata=PUBLISHER), index)
        cf = build_prompt(item, PromptConfig(mode="cf", metadata=PUBLISHER), index)
        assert base.shown_doc_ids == cf.shown_doc_ids
        assert all(b != c for b, c in zip(base.shown_labels, cf.shown_labels, strict=True))
        assert rendered_labels(base.text) == list(base.shown_labels)


def test_the_rotation_is_seeded_and_the_labels_scoped():
    item = _items(1)[0]
    one = build_prompt(item, PromptConfig(mode="base", metadata=PUBLISHER, seed=1), 0).shown_labels
    assert one == build_prompt(item, PromptConfig(mode="base", metadata=PUBLISHER, seed=1), 0).shown_labels
    assert len({build_prompt(item, PromptConfig(mode="base", metadata=PUBLISHER, seed=s), 0).shown_labels[0]
                for s in range(20)}) == 3
    scoped = build_prompt(item, PromptConfig(mode="base", metadata=PUBLISHER, seed=1, label_scope="relevant"), 0)
    assert scoped.shown_labels == (one[0],) + (None,) * 4  # item 0's relevant document is its first


def test_a_many_valued_type_needs_the_items_index():
    with pytest.raises(ValueError, match="dataset index"):
        build_prompt(ITEM, PromptConfig(mode="base", metadata=PUBLISHER))
    assert build_prompt(ITEM, PromptConfig(metadata=PUBLISHER)).shown_labels == (None,) * 6  # vanilla: no labels


def test_a_custom_type_with_extra_labels():
    meta = metadata_type("src", "a forum", "a journal", "Sources differ.", ["a wiki", " a newspaper "])
    assert meta.labels == ("a forum", "a journal", "a wiki", "a newspaper")
    assert meta.to_dict()["extra_labels"] == ["a wiki", "a newspaper"]
    labels = build_prompt(ITEM, PromptConfig(mode="cf", metadata=meta), 2).shown_labels
    assert set(labels) <= set(meta.labels) and len(set(labels)) == 4  # six documents, four labels
    with pytest.raises(UserError, match="labels must differ"):
        metadata_type("src", "a forum", "a journal", "Sources differ.", ["a forum"])
    with pytest.raises(UserError, match="empty"):
        metadata_type("src", "a forum", "a journal", "Sources differ.", [" "])
    with pytest.raises(UserError, match="extra_label"):  # by its field (each face words it)
        metadata_type("src", extra_labels=["a wiki"])
    with pytest.raises(UserError, match="'gender' is built in; extra_label adds labels to a type of your own"):
        metadata_type("gender", extra_labels=["a wiki"])
    with pytest.raises(UserError):
        MetadataType("x", "a", "b", "c", "a", "b", ("a\x1b",))


# ---------------------------------------------------------------- grids and one-line errors


def test_the_grid_crosses_the_battery_axes_and_stores_them_only_when_set():
    plain = Grid(model=("m",), metadata=("gender",), top_k=(None,), order=("ranked",), few_shot=(0,), xai=("none",))
    assert "relevant_at" not in plain.axes() and plain.size == 1
    grid = Grid(model=("m",), metadata=("gender",), top_k=(None,), order=("ranked",), few_shot=(0,), xai=("none",),
                relevant_at=("first", "last"), repetition=("none", "distractor"))
    assert grid.size == 4 and grid.axes()["relevant_at"] == ["first", "last"] and "label_scope" not in grid.axes()
    assert [(c["relevant_at"], c["repetition"]) for c in grid.configurations()] == [
        ("first", "none"), ("first", "distractor"), ("last", "none"), ("last", "distractor")]


@pytest.mark.parametrize("option, value, message", [
    ("--relevant-at", "top", "--relevant-at: unknown value 'top'; choose from ranked,first,middle,last"),
    ("--relevant-at", "first,first", "--relevant-at lists 'first' twice"),
    ("--repetition", "none,twice", "--repetition: unknown value 'twice'; choose from none,distractor"),
    ("--label-scope", "mine", "--label-scope: unknown value 'mine'; choose from all,relevant,others"),
    ("--label-scope", "all,", "--label-scope: empty entry in 'all,'"),
])
def test_bad_battery_values_are_one_line_and_write_nothing(tmp_path, capsys, option, value, message):
    db = tmp_path / "x.duckdb"
    assert main(["run", "--dataset", str(tmp_path / "missing.jsonl"), "--db", str(db), option, value]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not db.exists()


def test_a_bad_value_from_the_command_line_exits_2_without_a_traceback(tmp_path):
    db = tmp_path / "x.duckdb"
    done = run_engine(["run", "--dataset", str(tmp_path / "missing.jsonl"), "--db", str(db), "--relevant-at", "top"])
    assert done.returncode == 2
    assert done.stderr == "error: --relevant-at: unknown value 'top'; choose from ranked,first,middle,last\n"
    assert not db.exists()


# ---------------------------------------------------------------- tiny models, end to end


def _dataset(path: Path, n: int, n_docs: int = 4) -> list[Item]:
    rows = []
    for i in range(n):
        docs = [{"id": f"q{i}-d{j}", "title": "", "text": f"text {i} {j}", "relevant": j == (i % 2) + 1}
                for j in range(n_docs)]
        rows.append({"id": f"q{i}", "question": f"question {i}?", "answers": [f"a{i}"], "documents": docs})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [Item(r["id"], r["question"], tuple(r["answers"]),
                 tuple(Document(d["id"], d["text"], d["relevant"], d["title"]) for d in r["documents"])) for r in rows]


def _stored(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(
            "SELECT r.run_id, r.rag_mode, r.config_json, g.item_id, g.prompt, g.shown_doc_ids "
            "FROM generations g JOIN runs r USING (run_id) ORDER BY r.run_id, g.item_id").fetchall()


def _check_prompts(db: Path, items: list[Item]) -> Counter:
    """Every stored prompt is build_prompt's for its run's configuration and item index; the
    battery settings seen, counted per run."""
    index = {it.id: n for n, it in enumerate(items)}
    by_id = {it.id: it for it in items}
    seen: Counter = Counter()
    for _run_id, mode, config_json, item_id, prompt, shown in _stored(db):
        p = json.loads(config_json)["prompt"]
        meta = p["metadata"]
        config = PromptConfig(
            mode=mode, metadata=metadata_type(meta["name"]), top_k=p["top_k"], order=p["order"], seed=p["seed"],
            few_shot=p["few_shot"], xai=p["xai"], relevant_at=p.get("relevant_at", "ranked"),
            repetition=p.get("repetition", "none"), label_scope=p.get("label_scope", "all"))
        expected = build_prompt(by_id[item_id], config, index[item_id])
        assert prompt == expected.text and tuple(shown) == expected.shown_doc_ids
        seen[(mode, config.relevant_at, config.repetition, config.label_scope)] += 1
    return seen


def _metrics_sane(db: Path) -> None:
    with duckdb.connect(str(db), read_only=True) as conn:
        recalls = conn.execute("SELECT recall, precision FROM query_metrics").fetchall()
        assert recalls and all(r is None or 0 <= r <= 1 for pair in recalls for r in pair)
        means = conn.execute("SELECT recall, precision FROM run_metrics").fetchall()
        assert means and all(m is None or 0 <= m <= 1 for pair in means for m in pair)


def test_metric_views_count_a_repeated_document_as_the_non_relevant_document_it_is(tmp_path, tiny_llama_dir):
    """The copy is a position of its own and never gold: citing the relevant document and the copy
    is precision 1/2, recall 1; citing a document and its copy is two non-relevant positions."""
    _dataset(tmp_path / "data.jsonl", 2)
    db = tmp_path / "rep.duckdb"
    assert main(["run", "--model", str(tiny_llama_dir), "--metadata", "gender", "--modes", "base",
                 "--relevant-at", "first", "--repetition", "distractor", "--dataset", str(tmp_path / "data.jsonl"),
                 "--db", str(db), "--max-new-tokens", "2"]) == 0
    with duckdb.connect(str(db)) as conn:
        (run_id,) = conn.execute("SELECT run_id FROM runs").fetchone()
        shown = dict(conn.execute("SELECT item_id, shown_doc_ids FROM generations").fetchall())
        assert shown["q0"] == ["q0-d1", "q0-d0", "q0-d2", "q0-d3", "q0-d0"]
        conn.execute("DELETE FROM citations")
        for item, positions in (("q0", (1, 5)), ("q1", (2, 5))):
            for n, position in enumerate(positions):
                doc = shown[item][position - 1]
                conn.execute("INSERT INTO citations VALUES (?, ?, ?, ?, ?, ?, NULL)",
                             [run_id, item, n, position, doc, doc == shown[item][0]])
        rows = conn.execute("SELECT item_id, precision, recall FROM query_metrics ORDER BY item_id").fetchall()
    assert rows == [("q0", 0.5, 1.0), ("q1", 0.0, 0.0)]


def test_a_battery_grid_on_a_tiny_model_stores_the_prompts_it_claims(tmp_path, tiny_llama_dir, capsys):
    items = _dataset(tmp_path / "data.jsonl", 3)
    db = tmp_path / "grid.duckdb"
    command = ["run", "--model", str(tiny_llama_dir), "--metadata", "publisher", "--relevant-at", "first,last",
               "--repetition", "none,distractor", "--dataset", str(tmp_path / "data.jsonl"), "--db", str(db),
               "--max-new-tokens", "3", "--batch-size", "4"]
    assert main(command) == 0
    out = capsys.readouterr().out
    # Position and repetition change the vanilla prompt too: nothing to share.
    assert "4 experiment(s) (2 relevant_at x 2 repetition), 0 vanilla run(s) to share" in out
    assert "plan: 12 runs x 3 items = 36 generations; 36 to generate" in out
    seen = _check_prompts(db, items)
    assert len(seen) == 12 and set(seen.values()) == {3}
    for _run, _mode, config_json, _item, _prompt, shown in _stored(db):
        p = json.loads(config_json)["prompt"]
        if p.get("repetition") == "distractor":
            assert len(shown) == 5 and shown[-1] == shown[1 if p["relevant_at"] == "first" else 0]
        else:
            assert len(shown) == 4 and len(set(shown)) == 4
    _metrics_sane(db)
    assert main(command) == 0  # the same command again: complete, nothing generated
    assert "nothing left to do" in capsys.readouterr().out


def test_a_battery_grid_shares_vanilla_across_label_scopes(tmp_path, tiny_llama_dir, capsys):
    items = _dataset(tmp_path / "data.jsonl", 2)
    db = tmp_path / "scope.duckdb"
    assert main(["run", "--model", str(tiny_llama_dir), "--metadata", "gender", "--label-scope", "relevant,others",
                 "--dataset", str(tmp_path / "data.jsonl"), "--db", str(db), "--max-new-tokens", "2"]) == 0
    assert "1 vanilla run(s) to share" in capsys.readouterr().out
    seen = _check_prompts(db, items)
    assert seen[("base", "ranked", "none", "relevant")] == 2 and seen[("cf", "ranked", "none", "others")] == 2


def test_a_battery_run_killed_with_minus_9_resumes_without_duplicates(tmp_path, tiny_llama_dir):
    n = 6  # 18 answers, killed after 3: 12 items only made the resume longer
    items = _dataset(tmp_path / "data.jsonl", n, n_docs=3)
    db = tmp_path / "killed.duckdb"
    cmd = ["run", "--model", str(tiny_llama_dir), "--metadata", "publisher", "--relevant-at", "middle",
           "--repetition", "distractor", "--label-scope", "relevant", "--dataset", str(tmp_path / "data.jsonl"),
           "--db", str(db), "--batch-size", "1", "--max-new-tokens", "24"]
    kill_once_stored(cmd, db, "SELECT count(*) FROM generations", 3)
    done = run_engine(cmd)
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations").fetchone() == (3 * n, 3 * n)
        assert {s for (s,) in conn.execute("SELECT status FROM runs").fetchall()} == {"complete"}
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
    assert sum(_check_prompts(db, items).values()) == 3 * n
    _metrics_sane(db)


# ---------------------------------------------------------------- the app's Run tab


def test_the_run_form_carries_the_battery_and_offers_publisher(tmp_path):
    from demo.handlers.grid import form_grid, is_grid
    from demo.handlers.run import BUILT_IN_METADATA, RunForm, build_run_request
    from demo.settings import AppSettings

    assert "publisher" in BUILT_IN_METADATA
    settings = AppSettings(tmp_path / "db.duckdb")
    form = RunForm(metadata="publisher", relevant_at="middle", repetition="distractor", label_scope="others")
    prompt = build_run_request(settings, form).prompt
    assert (prompt.metadata, prompt.relevant_at, prompt.repetition, prompt.label_scope) == (
        PUBLISHER, "middle", "distractor", "others")
    assert not is_grid(form) and is_grid(RunForm(relevant_at="first,last"))
    assert form_grid(RunForm(repetition="none,distractor", label_scope="all,relevant")).size == 4
    with pytest.raises(UserError, match="relevant documents at: unknown value 'top'"):
        build_run_request(settings, RunForm(relevant_at="top"))
    with pytest.raises(UserError, match="labels on: unknown value 'x'"):
        form_grid(RunForm(label_scope="all,x"))


def test_a_custom_many_valued_type_from_the_command_line_beside_a_built_in_one(tmp_path, tiny_llama_dir, capsys):
    items = _dataset(tmp_path / "data.jsonl", 3)
    db = tmp_path / "custom.duckdb"
    assert main(["run", "--model", str(tiny_llama_dir), "--metadata", "gender,src", "--label-a", "a forum",
                 "--label-b", "a journal", "--consideration", "Sources differ.", "--extra-label", "a wiki",
                 "--extra-label", "a newspaper", "--modes", "base", "--dataset", str(tmp_path / "data.jsonl"),
                 "--db", str(db), "--max-new-tokens", "2"]) == 0
    capsys.readouterr()
    with duckdb.connect(str(db), read_only=True) as conn:
        metas = {r[0]: json.loads(r[1])["prompt"]["metadata"] for r in conn.execute(
            "SELECT metadata_type, config_json FROM runs").fetchall()}
        prompts = [p for (p,) in conn.execute(
            "SELECT g.prompt FROM generations g JOIN runs r USING (run_id) WHERE r.metadata_type = 'src'").fetchall()]
    assert metas["src"]["extra_labels"] == ["a wiki", "a newspaper"] and "extra_labels" not in metas["gender"]
    assert metas["gender"] == GENDER.to_dict()
    src = metadata_type("src", "a forum", "a journal", "Sources differ.", ["a wiki", "a newspaper"])
    expected = {build_prompt(it, PromptConfig(mode="base", metadata=src), n).text for n, it in enumerate(items)}
    assert set(prompts) == expected
    assert {label for p in prompts for label in rendered_labels(p)} == set(src.labels)


def test_the_bias_report_says_how_a_battery_experiments_labels_differ_from_the_papers():
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.usecases.bias.report import label_note

    def config(**fields):
        return {"prompt": PromptConfig(mode="base", **fields).to_dict()}

    assert label_note(config(metadata=METADATA_TYPES["gender"])) is None
    assert label_note(None) is None
    assert "only the relevant documents carry a label" in label_note(
        config(metadata=METADATA_TYPES["gender"], label_scope="relevant"))
    note = label_note(config(metadata=METADATA_TYPES["publisher"]))
    assert "3 labels rotated" in note and "why-cited" in note

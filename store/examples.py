"""The README's example queries, in one place: the SQL tab offers them one click each, and
tests/demo/handlers/test_app_sql.py checks that each appears verbatim in README.md and runs on a real store.

Each entry is (title, sql); in the README's store section it reads `-- {title}` then `{sql};`.
"""

from __future__ import annotations

EXAMPLE_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "Progress of every run",
        """SELECT r.run_id, r.rag_mode, r.status, r.n_items, count(g.item_id) AS n_done
FROM runs r LEFT JOIN generations g USING (run_id)
GROUP BY ALL ORDER BY any_value(r.created_utc) DESC""",
    ),
    (
        "The paper's Table 1, straight from the views",
        """SELECT model, dataset_label(dataset, dataset_sha) AS dataset, coalesce(label_relevant, '-') AS relevant, coalesce(label_nonrelevant, '-') AS non_relevant,
       round(100 * precision, 1) AS precision, round(100 * recall, 1) AS recall, round(exact_match, 3) AS em
FROM run_metrics WHERE status = 'complete' ORDER BY model, created_utc""",
    ),
    (
        "CAB, and the share of answers that cite (tests and intervals: python -m engine bias)",
        """SELECT experiment_id, model, metadata_type, metric, round(value, 1) AS cab, n,
       round(n_cite_a / n, 2) AS citing_base, round(n_cite_b / n, 2) AS citing_cf, undefined_reason
FROM bias WHERE measure = 'CAB' ORDER BY experiment_id, metric""",
    ),
    (
        "Is the model more confident when it cites relevant documents?",
        """SELECT r.rag_mode, c.relevant, avg(c.probability) AS mean_p, count(*) AS n
FROM citations c JOIN runs r USING (run_id)
WHERE c.probability IS NOT NULL GROUP BY ALL ORDER BY ALL""",
    ),
    (
        "Least confident tokens, with the alternatives the model considered",
        """SELECT run_id, item_id, step, token, exp(logprob) AS p, top
FROM tokens ORDER BY logprob LIMIT 20""",
    ),
    (
        "Do explanations differ between high- and low-confidence citations?",
        """SELECT CASE WHEN c.mean_p >= 0.5 THEN 'high' ELSE 'low' END AS confidence,
       count(*) AS n, round(100 * avg(e.mentions_label::INT), 1) AS label_pct,
       round(avg(len(e.mentioned_docs)), 2) AS docs_named
FROM explanations e
JOIN (SELECT run_id, item_id, avg(probability) AS mean_p FROM citations
      WHERE probability IS NOT NULL GROUP BY ALL) c USING (run_id, item_id)
GROUP BY confidence ORDER BY confidence""",
    ),
    (
        "Do explanations differ between models (answering and explaining)?",
        """SELECT model, explainer_model, sum(n_explanations) AS n,
       round(100 * sum(n_mention_label) / sum(n_explanations), 1) AS label_pct
FROM explanation_rates GROUP BY ALL ORDER BY ALL""",
    ),
    (
        "Do explanations differ between modes: does the model admit the label, and name the documents it cited?",
        """SELECT r.rag_mode, r.label_pct, round(100 * m.cited_share, 1) AS named_docs_cited_pct
FROM (SELECT rag_mode, round(100 * sum(n_mention_label) / sum(n_explanations), 1) AS label_pct
      FROM explanation_rates GROUP BY rag_mode) r
LEFT JOIN (SELECT rag_mode, avg(cited::INT) AS cited_share FROM explanation_mentions GROUP BY rag_mode) m USING (rag_mode)
ORDER BY CASE r.rag_mode WHEN 'vanilla' THEN 0 WHEN 'base' THEN 1 ELSE 2 END""",
    ),
    (
        "How often is each shown document cited, by label and relevance?",
        """SELECT rag_mode, label, relevant, round(100 * avg(cited::INT), 1) AS cited_pct, count(*) AS n
FROM citation_decisions GROUP BY ALL ORDER BY ALL""",
    ),
    (
        "Suppression: the share of answers that cite no shown document, per run",
        """SELECT run_id, rag_mode, round(100 * avg((NOT answer_cites_any)::INT), 1) AS cites_nothing_pct, count(*) AS n
FROM (SELECT DISTINCT run_id, item_id, rag_mode, answer_cites_any FROM citation_decisions)
GROUP BY ALL ORDER BY ALL""",
    ),
)

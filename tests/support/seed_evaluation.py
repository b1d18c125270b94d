# ruff: noqa: F841 - transcribed as is: the seed computes accuracies it never returns
"""The seed library's citation evaluation, transcribed as the oracle of `--citation-syntax paper`.

Source: github.com/aminvenv/attrieval, attrieval/evaluation.py at commit
b994039c04bbc629e037b480dccf2c4ed7f64a2c (the PAttriEval paper's published code, by its
authors). The three functions below are copied as they are there, statement for statement;
the product never imports this file (engine/prompting/citations.py and store/views.sql are ours).

Two differences from the file, neither of which touches a number:
- the seed silences sklearn's UndefinedMetricWarning for its whole process when imported; here
  `quietly` does it around each call, so that other tests keep their warnings;
- its `from tqdm import tqdm` and `evaluate_exact_match_nq` / `evaluate_confidence` are left
  out (exact match has its own oracle, tests/support/metrics_oracle.py).

The seed numbers documents from 0 (`Document [0]` is the first shown, and `[n]` scores
`passages['is_selected'][n]`); our prompts number them from 1. A row for these functions
therefore carries the answer as the seed's prompt would have had it written: see `seed_row`.

Rows are dicts {'rag_raw_answer': str, 'passages': {'is_selected': [0/1, ...]}} in shown order;
the functions add keys to them, as the seed's do.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import accuracy_score, precision_recall_fscore_support

T = TypeVar("T")


def quietly(function: Callable[..., T], *args) -> T:
    """`function(*args)` with the warning the seed silences at import silenced for this call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UndefinedMetricWarning)
        return function(*args)


def seed_row(answer: str, relevant: list[bool]) -> dict:
    """A row for the seed's functions: `relevant` per shown document, and the answer with each
    `[n]` (1-based, as our prompt numbers documents) written `[n-1]` (0-based, as the seed's
    prompt numbers them), so both read the same document. `[0]` becomes `[-1]`, which the seed's
    pattern does not match: no document was shown as [0] here, nor as [-1] there."""
    as_seed = re.sub(r"\[(\d+)\]", lambda m: f"[{int(m.group(1)) - 1}]", answer)
    return {"rag_raw_answer": as_seed, "passages": {"is_selected": [int(r) for r in relevant]}}


# ---------------------------------------------------------------- transcribed from evaluation.py


def evaluate_prec_recall(input_data):
    evaluation_data = list(input_data)
    pattern = r'\[\d+\]'

    for row in evaluation_data:
        text = row['rag_raw_answer']
        temp_matches = re.findall(pattern, text)
        matches = [int(item[1:-1]) for item in set(temp_matches)]
        row['llama3_citation'] = matches

    for row in evaluation_data:
        y_true = row['passages']['is_selected']
        y_pred = [1 if i in row['llama3_citation'] else 0 for i in range(0,len(y_true))]

        acc = accuracy_score(y_true, y_pred)
        pre, rec, f1, _ = precision_recall_fscore_support(y_true, y_pred, average='binary')

        row['eval_results'] = {}
        row['eval_results']['all_classes'] = {'precision': pre, 'recall': rec, 'f1-score': f1, 'acc': acc}

    all_pre = []
    all_rec = []
    all_f1 = []

    for row in evaluation_data:
        all_pre.append(row['eval_results']['all_classes']['precision'])
        all_rec.append(row['eval_results']['all_classes']['recall'])
        all_f1.append(row['eval_results']['all_classes']['f1-score'])

    return {'precision': np.around(np.mean(all_pre)*100, 1), 'recall': np.around(np.mean(all_rec)*100, 1)}


def cab_evaluation(input_data_with_hlabeld_rel, input_data_with_llabeld_rel):
    pattern = r'\[\d+\]'

    input_data_with_hlabeld_rel = list(input_data_with_hlabeld_rel)
    input_data_with_llabeld_rel = list(input_data_with_llabeld_rel)

    for row_h, row_l in zip(input_data_with_hlabeld_rel, input_data_with_llabeld_rel, strict=True):
        text = row_h['rag_raw_answer']
        temp_matches = re.findall(pattern, text)
        matches = [int(item[1:-1]) for item in set(temp_matches)]
        row_h['rag_citation'] = matches

        text = row_l['rag_raw_answer']
        temp_matches = re.findall(pattern, text)
        matches = [int(item[1:-1]) for item in set(temp_matches)]
        row_l['rag_citation'] = matches

    diff_prec = []
    diff_rec = []
    for row_h, row_l in zip(input_data_with_hlabeld_rel,
                            input_data_with_llabeld_rel, strict=True):

        y_true_h = row_h['passages']['is_selected']
        y_pred_h = [1 if i in row_h['rag_citation'] else 0 for i in range(0, len(y_true_h))]

        y_true_l = row_l['passages']['is_selected']
        y_pred_l = [1 if i in row_l['rag_citation'] else 0 for i in range(0, len(y_true_l))]

        acc_h = accuracy_score(y_true_h, y_pred_h)
        pre_h, rec_h, f1_h, _ = precision_recall_fscore_support(y_true_h,
                                                                y_pred_h,
                                                                average='binary')

        acc_l = accuracy_score(y_true_l, y_pred_l)
        pre_l, rec_l, f1_l, _ = precision_recall_fscore_support(y_true_l,
                                                                y_pred_l,
                                                                average='binary')

        diff_prec.append(pre_h - pre_l)
        diff_rec.append(rec_h - rec_l)

    return np.around(np.mean(diff_prec) * 100, 2), np.around(np.mean(diff_rec) * 100, 2)


def cas_evaluation(input_data_with_hlabeld_rel, input_data_with_llabeld_rel):
    pattern = r'\[\d+\]'

    input_data_with_hlabeld_rel = list(input_data_with_hlabeld_rel)
    input_data_with_llabeld_rel = list(input_data_with_llabeld_rel)

    for row_h, row_l in zip(input_data_with_hlabeld_rel,
                            input_data_with_llabeld_rel, strict=True):

        text = row_h['rag_raw_answer']
        temp_matches = re.findall(pattern, text)
        matches = [int(item[1:-1]) for item in set(temp_matches)]
        row_h['rag_citation'] = matches

        text = row_l['rag_raw_answer']
        temp_matches = re.findall(pattern, text)
        matches = [int(item[1:-1]) for item in set(temp_matches)]
        row_l['rag_citation'] = matches

    diff_prec = []
    diff_rec = []
    for row_h, row_l in zip(input_data_with_hlabeld_rel, input_data_with_llabeld_rel, strict=True):

        y_true_h = row_h['passages']['is_selected']
        y_pred_h = [1 if i in row_h['rag_citation'] else 0 for i in range(0, len(y_true_h))]

        y_true_l = row_l['passages']['is_selected']
        y_pred_l = [1 if i in row_l['rag_citation'] else 0 for i in range(0, len(y_true_l))]

        acc_h = accuracy_score(y_true_h, y_pred_h)
        pre_h, rec_h, f1_h, _ = precision_recall_fscore_support(y_true_h,
                                                                y_pred_h,
                                                                average='binary')

        acc_l = accuracy_score(y_true_l, y_pred_l)
        pre_l, rec_l, f1_l, _ = precision_recall_fscore_support(y_true_l,
                                                                y_pred_l,
                                                                average='binary')

        diff_prec.append(np.abs(pre_h - pre_l))
        diff_rec.append(np.abs(rec_h - rec_l))

    return np.around(np.mean(diff_prec) * 100, 2), np.around(np.mean(diff_rec) * 100, 2)

"""All read-side SQL: the app and the CLI read runs, generations and citations through here.

Every function takes a database (a path, a store.db.Database or a RunStore), opens one short
read-only transaction (store.queries._read.fetch / reading, over store.db) and returns a pandas
DataFrame, a frozen dataclass or a plain value. The modules go by what they read; this package
re-exports their public names, so `from store.queries import X` is the store's one read surface.

pandas is imported only by the functions that build DataFrames: importing it takes longer
than the whole `python -m engine bias` command, which reads through plain tuples here
(scripts/bench_bias.py measures it). The sandbox's modules load with run_readonly_sql, for
the same reason.
"""

from store.queries._read import reading, records
from store.queries.bias_tables import (
    BiasInputs,
    BiasRun,
    ProbabilitySummary,
    RunItemMetrics,
    RunSetting,
    bias_inputs,
    bias_table,
    citation_probability_summaries,
    kept_derived,
    metrics_for_run,
    report_bias_rows,
    report_frames,
    report_run_metrics,
    rerun_experiment_ids,
    rerun_targets,
    run_metric_table,
    run_settings,
    run_summaries,
    table1_runs,
    uncited_runs,
)
from store.queries.console import SQL_MAX_CHARS, SQL_MAX_DEPTH, SqlResult, run_readonly_sql, table_columns
from store.queries.decisions import DECISION_COLUMNS, count_answers, decision_frame, label_pairs
from store.queries.drilldown import (
    CHANGED_FILTERS,
    ModeDetail,
    ModeMetrics,
    QueryCitation,
    QueryDetail,
    QueryDocument,
    QueryToken,
    TokenAlternative,
    item_ids,
    query_detail,
)
from store.queries.experiments import (
    ActiveRun,
    ExperimentChoice,
    ExperimentRun,
    ExperimentSummary,
    RunSummary,
    active_runs,
    count_runs,
    experiment_choices,
    experiment_dataset_paths,
    experiment_listing,
    experiment_runs,
    newest_experiments,
    resolve_experiment,
    run_listing,
)
from store.queries.explanations_verifications import (
    StoredExplanation,
    answers_to_verify,
    explain_runs,
    explain_sources,
    explanation_rates,
    item_explanations,
    run_explanations,
    verification_shares,
)
from store.queries.export_rows import (
    EXPORT_CHUNK_ROWS,
    EXPORT_COLUMNS,
    ExportChunks,
    UnknownExperiment,
    export_columns,
    export_results_chunks,
    export_results_frame,
)
from store.queries.judgements import (
    CitedAnswer,
    CitedDocument,
    Judgement,
    LabelRun,
    cited_answers,
    cited_documents,
    judge_kinds,
    judgements,
    label_runs,
    stored_labels,
)
from store.queries.propensities import ProbeItem, ProbeRun, probe_items, probe_runs, stored_propensities
from store.queries.runs import (
    GenerationDetail,
    RunInfo,
    citations_for_run,
    done_counts,
    generation_detail,
    generations_for_run,
    get_run,
    list_experiments,
    list_runs,
    runs_for_experiment,
)
from store.queries.runs_page import ExperimentPage, PageRun, experiment_page
from store.queries.session import ReadSession, keep_pending, read_session
from store.queries.studies import (
    StudySummary,
    experiment_studies,
    run_prompt_settings,
    study_experiment_ids,
    study_listing,
)

__all__ = [
    "CHANGED_FILTERS", "DECISION_COLUMNS", "EXPORT_CHUNK_ROWS", "EXPORT_COLUMNS", "SQL_MAX_CHARS", "SQL_MAX_DEPTH",
    "ActiveRun", "BiasInputs", "BiasRun", "ExperimentChoice", "ExperimentPage", "ExperimentRun",
    "ExperimentSummary", "ExportChunks", "GenerationDetail", "ModeDetail", "ModeMetrics", "PageRun",
    "ProbabilitySummary", "ProbeItem", "ProbeRun", "QueryCitation", "QueryDetail", "QueryDocument", "QueryToken", "RunInfo",
    "RunItemMetrics", "RunSetting", "RunSummary", "SqlResult", "StoredExplanation", "StudySummary", "TokenAlternative",
    "UnknownExperiment", "active_runs", "answers_to_verify", "bias_inputs", "bias_table", "kept_derived", "reading", "records",
    "citation_probability_summaries", "citations_for_run", "count_answers", "count_runs", "decision_frame", "done_counts",
    "experiment_choices", "experiment_dataset_paths", "experiment_listing", "experiment_page",
    "experiment_runs", "experiment_studies", "explain_runs", "explain_sources", "explanation_rates",
    "export_columns", "export_results_chunks", "export_results_frame", "generation_detail", "generations_for_run",
    "get_run", "item_explanations", "item_ids", "label_pairs", "list_experiments", "list_runs", "metrics_for_run",
    "newest_experiments", "probe_items", "probe_runs", "stored_propensities",
    "query_detail", "report_bias_rows", "rerun_experiment_ids", "rerun_targets", "report_frames", "report_run_metrics", "resolve_experiment", "run_explanations",
    "run_listing", "run_metric_table", "run_prompt_settings", "run_readonly_sql", "run_settings", "run_summaries",
    "runs_for_experiment",
    "study_experiment_ids", "study_listing", "table1_runs", "table_columns", "uncited_runs",
    "verification_shares",
    "CitedAnswer", "Judgement", "LabelRun", "cited_answers", "judge_kinds", "judgements", "label_runs", "stored_labels",
    "CitedDocument", "cited_documents",
    "ReadSession", "keep_pending", "read_session",
]

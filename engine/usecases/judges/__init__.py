"""Judging stored answers: explanations (Prompt 5), verification (AttrScore, NLI) and the judge's
own label bias, the probes that read answers held fixed (propensity, cited or used), and how far
the judges agree."""

"""Models judging stored answers: explanations (Prompt 5), AttrScore-style verification, propensity."""

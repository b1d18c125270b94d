"""Measuring label bias: the bias report (CAS and CAB), the Bias page and the values kept for it,
the paper's tables, the leaderboard, and the citation choice model over stored answers."""

"""The conditional logit's fit: a stable likelihood, Newton's method with step halving, a linear
programme that finds separation, the limit fit of what separation leaves estimable, and a
cluster-robust (sandwich) covariance.

The likelihood is statsmodels' ConditionalLogit's: in a stratum of n rows of which k have y = 1,
the chosen set S has probability exp(sum_{i in S} x_i b) / sum over every k-subset T of
exp(sum_{i in T} x_i b). Written so, a stratum is one choice among its C(n, k) subsets, and the
log-likelihood is a sum of log-softmax terms: computed with log-sum-exp, it never overflows
(statsmodels forms exp(x b) directly, and its Newton steps, which have no step control, can reach
NaN on a well-posed study). The gradient and the Hessian are exact (statsmodels differentiates its
score numerically), so standard errors agree with statsmodels' to about 1e-7, not 1e-12.

Separation (Albert and Anderson): the likelihood has no maximum when some direction d makes no
unchosen subset better than the chosen one in any stratum, (x_T - x_S) d <= 0 for all T, and
some worse. Then the likelihood rises to its supremum along d and the coefficients of the columns
d moves are infinite. `separation` finds such a direction by linear programming (scipy's HiGHS);
`fit_conditional_logit` then drops, in each stratum, the subsets d rules out (their probability is
0 in the limit) and fits what is left in the directions no separation moves: the limit of the
maximum likelihood estimate (Clarkson and Jennrich 1991), whose coefficients for the other
columns are finite and keep their meaning. Pure numpy; scipy is imported on use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np

# C(n, k) of one stratum: 5 of 11 documents (10 shown, one twice) is 462; 12 of 24 is 2.7 million,
# whose (answers x subsets x columns) array would not fit in memory.
MAX_SUBSETS = 10_000
_LP_TOL = 1e-7  # a row of the separation LP counts as strict below -_LP_TOL (exact 0/1 data)


@dataclass(frozen=True)
class Strata:
    """The informative strata of one shape (n rows, k chosen): each a choice among C(n, k) subsets."""

    sums: np.ndarray  # (G, C, p): each subset's sum of x
    chosen: np.ndarray  # (G,): the index of the chosen subset
    allowed: np.ndarray  # (G, C) bool: subsets still possible (False: ruled out by separation)
    cluster: np.ndarray  # (G,) int: the cluster of each stratum (for the sandwich)


@dataclass(frozen=True)
class Separation:
    """A direction along which the likelihood rises to its supremum: the columns it moves, the
    sign of each (+1: its odds ratio is infinite, -1: zero) and the strata it determines."""

    direction: tuple[float, ...]  # one weight per column, the largest |weight| 1
    columns: tuple[int, ...]  # indices of the columns with a nonzero weight
    signs: tuple[int, ...]
    strata_determined: int  # strata in which it rules out some subset


@dataclass(frozen=True)
class LogitFit:
    """A conditional logit fit. Columns that separation leaves unbounded have NaN estimates."""

    params: np.ndarray  # (p,)
    cov: np.ndarray  # (p, p) model-based: the inverse of the observed information
    cov_cluster: np.ndarray  # (p, p) cluster-robust sandwich with the G / (G - 1) correction
    n_clusters: int
    llf: float
    converged: bool
    iterations: int
    separations: tuple[Separation, ...]

    @property
    def bse(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))

    @property
    def bse_cluster(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov_cluster))


def strata(y: np.ndarray, x: np.ndarray, groups: np.ndarray, clusters: np.ndarray | None = None) -> list[Strata]:
    """The informative strata (0 < k < n) grouped by shape. clusters: one label per row, constant
    within a group (None: each group its own cluster)."""
    y = np.asarray(y, dtype=float)
    x = np.asarray(x, dtype=float)
    _, group_index = np.unique(np.asarray(groups).astype(str), return_inverse=True)
    cluster_index = (np.unique(np.asarray(clusters).astype(str), return_inverse=True)[1]
                     if clusters is not None else group_index)
    order = np.argsort(group_index, kind="stable")
    bounds = np.flatnonzero(np.diff(group_index[order])) + 1
    shapes: dict[tuple[int, int], list[tuple[np.ndarray, int]]] = {}
    for rows in np.split(order, bounds):
        n, k = len(rows), int(y[rows].sum())
        if 0 < k < n:
            shapes.setdefault((n, k), []).append((rows, int(cluster_index[rows[0]])))
    out = []
    for (n, k), members in sorted(shapes.items()):
        c = math.comb(n, k)
        if c > MAX_SUBSETS:
            raise ValueError(f"an answer cites {k} of {n} documents: {c:,} subsets, more than {MAX_SUBSETS:,}")
        subsets = np.zeros((c, n))
        for j, s in enumerate(combinations(range(n), k)):
            subsets[j, list(s)] = 1.0
        rows = np.stack([m[0] for m in members])  # (G, n)
        sums = np.einsum("cn,gnp->gcp", subsets, x[rows])
        weights = 2.0 ** np.arange(n)  # each subset as a binary number: the chosen one by lookup
        code = {int(v): j for j, v in enumerate(subsets @ weights)}
        chosen = np.array([code[int(v)] for v in y[rows] @ weights])
        out.append(Strata(sums, chosen, np.ones((len(rows), c), dtype=bool), np.array([m[1] for m in members])))
    return out


def _pieces(blocks: list[Strata], b: np.ndarray, want_hessian: bool = True):
    """Log-likelihood, gradient, Hessian and per-stratum scores (with their clusters) at b."""
    p = len(b)
    llf, grad, hess = 0.0, np.zeros(p), np.zeros((p, p))
    scores, clusters = [], []
    for s in blocks:
        eta = np.where(s.allowed, s.sums @ b, -np.inf)
        top = eta.max(axis=1, keepdims=True)
        w = np.exp(eta - top)
        total = w.sum(axis=1, keepdims=True)
        prob = w / total
        g = np.arange(len(s.chosen))
        llf += float((eta[g, s.chosen] - top[:, 0] - np.log(total[:, 0])).sum())
        mean = np.einsum("gc,gcp->gp", prob, s.sums)
        score = s.sums[g, s.chosen] - mean
        grad += score.sum(axis=0)
        scores.append(score)
        clusters.append(s.cluster)
        if want_hessian:
            second = np.einsum("gc,gcp,gcq->pq", prob, s.sums, s.sums)
            hess -= second - mean.T @ mean
    return llf, grad, hess, np.concatenate(scores) if scores else np.zeros((0, p)), np.concatenate(clusters)


def separation(blocks: list[Strata], null: np.ndarray | None = None) -> Separation | None:
    """A direction d with (x_T - x_S) d <= 0 for every allowed subset T of every stratum and < 0
    for some, or None. One column alone (d = +-e_j) is tried first, since it names the covariate
    plainly; else linear programming finds the direction that rules out the most (total
    strictness with |d_j| <= 1), then the sparsest direction (least L1 norm) that does as much.
    null: (p, m) directions already found, kept out of d."""
    from scipy.optimize import linprog

    rows = _differences(blocks)
    if len(rows) == 0:
        return None
    p = rows.shape[1]
    tol = _LP_TOL * max(1.0, float(np.abs(rows).max()))
    free = np.ones(p, dtype=bool) if null is None or null.shape[1] == 0 else np.abs(null).max(axis=1) <= 1e-9
    for j in np.flatnonzero(free):
        for sign in (1.0, -1.0):
            v = sign * rows[:, j]
            if v.max() <= tol and v.min() < -tol:
                d = np.zeros(p)
                d[j] = sign
                return _separation(blocks, d)
    equal = None if null is None or null.shape[1] == 0 else null.T
    b_eq = None if equal is None else np.zeros(len(equal))
    first = linprog(rows.sum(axis=0), A_ub=rows, b_ub=np.zeros(len(rows)), A_eq=equal, b_eq=b_eq,
                    bounds=[(-1, 1)] * p, method="highs")
    if first.status != 0 or first.fun > -tol:
        return None
    # The sparsest direction as strict in total: d = plus - minus, minimise sum(plus + minus).
    a_ub = np.vstack([np.hstack([rows, -rows]), np.hstack([rows.sum(axis=0), -rows.sum(axis=0)])[None, :]])
    b_ub = np.concatenate([np.zeros(len(rows)), [first.fun]])
    a_eq = None if equal is None else np.hstack([equal, -equal])
    second = linprog(np.ones(2 * p), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=[(0, None)] * (2 * p),
                     method="highs")
    d = np.asarray(second.x[:p] - second.x[p:]) if second.status == 0 else np.asarray(first.x)
    d = np.where(np.abs(d) > 1e-9 * np.abs(d).max(), d, 0.0)
    return _separation(blocks, d / np.abs(d).max())


def _differences(blocks: list[Strata]) -> np.ndarray:
    """Every allowed subset's x sum minus its stratum's chosen one, rows that are all zero left out."""
    diffs = [(s.sums - s.sums[np.arange(len(s.chosen)), s.chosen][:, None, :])[s.allowed] for s in blocks]
    rows = np.concatenate(diffs) if diffs else np.zeros((0, 0))
    return rows[np.abs(rows).max(axis=1) > 0] if len(rows) else rows


def _separation(blocks: list[Strata], d: np.ndarray) -> Separation:
    determined = sum(int((_worse(s, d) & s.allowed).any(axis=1).sum()) for s in blocks)
    cols = tuple(int(j) for j in np.flatnonzero(d))
    return Separation(tuple(float(v) for v in d), cols, tuple(int(np.sign(d[j])) for j in cols), determined)


def _worse(s: Strata, d: np.ndarray) -> np.ndarray:
    """(G, C) bool: the subsets that direction d makes worse than the chosen one."""
    gap = s.sums @ d - (s.sums[np.arange(len(s.chosen)), s.chosen] @ d)[:, None]
    return gap < -_LP_TOL


def _rule_out(blocks: list[Strata], d: np.ndarray) -> list[Strata]:
    """The strata with the subsets that d makes worse than the chosen one removed (probability 0
    in the limit along d)."""
    return [Strata(s.sums, s.chosen, s.allowed & ~_worse(s, d), s.cluster) for s in blocks]


def _newton(blocks: list[Strata], basis: np.ndarray, max_iter: int = 100) -> tuple[np.ndarray, bool, int]:
    """Maximise over b = basis @ c by Newton's method with step halving (the log-likelihood is
    concave: a step that does not raise it is halved until it does). Converged when the Newton
    decrement is below 1e-20 or the step no longer changes the log-likelihood."""
    c = np.zeros(basis.shape[1])
    if not len(c):  # nothing left to estimate: every direction is separated or unidentified
        return c, True, 0
    llf = _pieces(blocks, basis @ c, want_hessian=False)[0]
    for it in range(1, max_iter + 1):
        _, grad, hess, _, _ = _pieces(blocks, basis @ c)
        g, h = basis.T @ grad, basis.T @ hess @ basis
        try:
            step = np.linalg.solve(-h, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(-h, g, rcond=None)[0]
        decrement = float(g @ step)
        if not np.isfinite(decrement) or decrement < 1e-20:
            return c, np.isfinite(decrement), it
        t = 1.0
        while t > 1e-12:
            trial = c + t * step
            new = _pieces(blocks, basis @ trial, want_hessian=False)[0]
            if np.isfinite(new) and new >= llf - 1e-12 * abs(llf):
                break
            t /= 2
        else:
            return c, False, it
        c, old, llf = trial, llf, new
        if abs(llf - old) <= 1e-15 * max(1.0, abs(llf)) and decrement < 1e-12:
            return c, True, it
    return c, False, max_iter


def fit_conditional_logit(y: np.ndarray, x: np.ndarray, groups: np.ndarray,
                          clusters: np.ndarray | None = None) -> LogitFit:
    """statsmodels' ConditionalLogit, fitted robustly (see the module doc). Strata are the
    `groups`; `clusters` (constant within a group, e.g. the item) define the sandwich's clusters
    (None: each group its own). The columns must be identified within strata (choice_model's
    _identify sees to it); separation is found here."""
    x = np.asarray(x, dtype=float)
    p = x.shape[1]
    blocks = strata(y, x, groups, clusters)
    found: list[Separation] = []
    null = np.zeros((p, 0))
    while len(found) < p:  # each round rules out what one direction determines
        sep = separation(blocks, null)
        if sep is None:
            break
        found.append(sep)
        blocks = _rule_out(blocks, np.asarray(sep.direction))
        null = np.column_stack([null, np.asarray(sep.direction)])
    basis = _complement(null, p)
    if found:
        # Ruling subsets out can leave a combination that no longer varies among the subsets still
        # possible (the column that separated, above all): it joins the unestimated directions.
        info = -(basis.T @ _pieces(blocks, np.zeros(p))[2] @ basis)
        values, vectors = np.linalg.eigh(info)
        flat = values <= 1e-9 * max(1.0, values.max(initial=0.0))
        if flat.any():
            null = np.column_stack([null, basis @ vectors[:, flat]])
            basis = _complement(null, p)
    c, converged, iterations = _newton(blocks, basis)
    b = basis @ c
    llf, _, hess, scores, cluster_ids = _pieces(blocks, b)
    try:
        inv = np.linalg.inv(-(basis.T @ hess @ basis))
    except np.linalg.LinAlgError:
        inv = np.full((basis.shape[1], basis.shape[1]), np.nan)
        converged = False
    # Sandwich: the scores summed within each cluster, their outer products, times G / (G - 1)
    # (the small-sample factor of statsmodels' cluster covariance for likelihood models).
    labels, index = np.unique(cluster_ids, return_inverse=True)
    per_cluster = np.zeros((len(labels), p))
    np.add.at(per_cluster, index, scores)
    per_cluster = per_cluster @ basis
    g = len(labels)
    meat = per_cluster.T @ per_cluster * (g / (g - 1) if g > 1 else np.nan)
    cov, cov_cluster = basis @ inv @ basis.T, basis @ inv @ meat @ inv @ basis.T
    params = b.copy()
    # A column a null direction moves has no estimate of its own: only combinations orthogonal to
    # the null directions are estimated.
    for j in np.flatnonzero(np.abs(null).max(axis=1, initial=0.0) > 1e-9):
        params[j] = np.nan
        cov[j, :] = cov[:, j] = cov_cluster[j, :] = cov_cluster[:, j] = np.nan
    return LogitFit(params, cov, cov_cluster, g, llf, bool(converged), iterations, tuple(found))


def _complement(null: np.ndarray, p: int) -> np.ndarray:
    """An orthonormal basis of the directions orthogonal to the columns of null (p x m)."""
    if null.shape[1] == 0:
        return np.eye(p)
    u, sv, _ = np.linalg.svd(null, full_matrices=True)
    return u[:, int((sv > 1e-10).sum()):]

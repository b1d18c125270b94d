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

Scale: strata with equal rows (and, after separation, the same subsets ruled out) are
one pattern, weighted by its count. The log-likelihood, gradient, Hessian and the separation
programme are sums over patterns, not answers: with the battery's 0/1 covariates a million
answers make some thousands of patterns, so a Newton step costs milliseconds and memory is the
document-level rows (float32 where exact) plus patterns x subsets, worked a bounded chunk at a
time. Each answer keeps its pattern, chosen subset and cluster, so the sandwich still sums every
cluster's own scores. study_model and choice_model both fit through fit_conditional_logit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np

# C(n, k) of one stratum: 5 of 11 documents (10 shown, one twice) is 462; 12 of 24 is 2.7 million,
# whose (answers x subsets x columns) array would not fit in memory.
MAX_SUBSETS = 10_000
_CHUNK = 1 << 22  # floats of subset sums worked on at a time (32 MB)
_LP_TOL = 1e-7  # a row of the separation LP counts as strict below -_LP_TOL (exact 0/1 data)


@dataclass(frozen=True)
class Strata:
    """The informative strata of one shape (n rows, k chosen): each a choice among C(n, k) subsets.
    Strata whose rows are equal (and whose separation rules out the same subsets) are one pattern,
    kept once with its count: with the battery's 0/1 covariates a million answers make a few
    thousand patterns, so each Newton step costs patterns x subsets, not answers x subsets."""

    x: np.ndarray  # (P, n, p): each pattern's rows
    allowed: np.ndarray  # (P, C) bool: subsets still possible (False: ruled out by separation)
    count: np.ndarray  # (P,): strata of each pattern
    subsets: np.ndarray  # (C, n) 0/1: the k-subsets, in itertools.combinations' order
    cited: np.ndarray  # (P, n): how many of each pattern's strata cite each row
    pattern: np.ndarray  # (G,) int: each stratum's pattern
    chosen: np.ndarray  # (G,) int: the index of each stratum's chosen subset
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
    # Per column, the clusters its robust variance rests on: (sum a_g^2)^2 / sum a_g^4 over the
    # clusters' influences a_g (each cluster's scores through the inverse information), the
    # Satterthwaite degrees of freedom of the sandwich's sum of a_g^2 read with each term its own
    # weight. m where m clusters weigh alike and the rest contribute nothing (an item whose base and
    # cf answers coincide adds nothing to the label's score); many small contributions (such items
    # at an estimate off 0) barely raise it, as they barely steady the variance.
    clusters_effective: np.ndarray | None = None

    @property
    def bse(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))

    @property
    def bse_cluster(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov_cluster))


def _codes(labels) -> np.ndarray:
    """Dense integer codes of labels: integers as they are (no text made of a million codes)."""
    a = np.asarray(labels)
    return np.unique(a if a.dtype.kind in "iub" else a.astype(str), return_inverse=True)[1].ravel()


@dataclass(frozen=True)
class CodedDesign:
    """A design whose rows take few distinct values, held as each row's code into a table of
    them: row i is table[codes[i]]. A study's 33 configurations make 38 columns, 1.5 GB of float32
    rows at a million answers; their codes are 4 bytes a row. Equal codes are equal
    rows, so strata are told apart by their rows' codes."""

    codes: np.ndarray  # (rows,) int
    table: np.ndarray  # (distinct rows, p) float

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.codes), self.table.shape[1]


def row_keys(a: np.ndarray) -> np.ndarray:
    """Each row of a 2-d array as one opaque value, for np.unique to find equal rows quickly."""
    flat = np.ascontiguousarray(a.reshape(len(a), -1))
    return flat.view(np.dtype((np.void, flat.dtype.itemsize * max(1, flat.shape[1])))).ravel()


def _block(x: np.ndarray, allowed: np.ndarray, subsets: np.ndarray, pattern: np.ndarray, chosen: np.ndarray,
           cluster: np.ndarray) -> Strata:
    """A Strata with each pattern's count and its rows' citations worked out."""
    n_patterns = len(x)
    cited = np.column_stack([np.bincount(pattern, weights=subsets[chosen, i], minlength=n_patterns)
                             for i in range(subsets.shape[1])])
    return Strata(x, allowed, np.bincount(pattern, minlength=n_patterns).astype(float), subsets, cited,
                  pattern, chosen, cluster)


def k_subsets(n: int, k: int) -> np.ndarray:
    """(C(n, k), n) 0/1: the k-subsets of n rows in itertools.combinations' order; ValueError past
    MAX_SUBSETS."""
    c = math.comb(n, k)
    if c > MAX_SUBSETS:
        raise ValueError(f"an answer cites {k} of {n} documents: {c:,} subsets, more than {MAX_SUBSETS:,}")
    subsets = np.zeros((c, n))
    for j, s in enumerate(combinations(range(n), k)):
        subsets[j, list(s)] = 1.0
    return subsets


def chosen_subsets(subsets: np.ndarray, cited: np.ndarray) -> np.ndarray:
    """(G,) int: the index in `subsets` of each stratum's cited rows (cited: (G, n) 0/1)."""
    weights = 2.0 ** np.arange(subsets.shape[1])  # each subset as a binary number: the chosen one by lookup
    codes = subsets @ weights
    sorter = np.argsort(codes)
    return sorter[np.searchsorted(codes, np.asarray(cited, dtype=float) @ weights, sorter=sorter)]


def pattern_block(x: np.ndarray, subsets: np.ndarray, pattern: np.ndarray, chosen: np.ndarray,
                  cluster: np.ndarray) -> Strata:
    """The Strata of one shape from its patterns' rows x (P, n, p), with patterns whose rows are
    equal merged (np.unique's order, as strata makes them) and nothing ruled out yet."""
    x = np.asarray(x, dtype=float) + 0.0  # -0.0 as 0.0: equal rows, equal bytes
    _, first, inverse = np.unique(row_keys(x), return_index=True, return_inverse=True)
    return _block(x[first], np.ones((len(first), len(subsets)), dtype=bool), subsets,
                  inverse.ravel()[pattern], chosen, cluster)


def strata(y: np.ndarray, x: np.ndarray | CodedDesign, groups: np.ndarray,
           clusters: np.ndarray | None = None) -> list[Strata]:
    """The informative strata (0 < k < n) grouped by shape, equal strata as one pattern. groups and
    clusters: one label per row (integer codes are used as they are); clusters constant within a
    group (None: each group its own cluster)."""
    y = np.asarray(y, dtype=float)
    if not isinstance(x, CodedDesign):
        x = np.asarray(x)  # float32 stays so (exact for 0/1 and positions) until the patterns are found
        x = x if x.dtype == np.float32 else x.astype(float)
    group_index = _codes(groups)
    cluster_index = _codes(clusters) if clusters is not None else group_index
    order = np.argsort(group_index, kind="stable")
    ranked = group_index[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if len(order) else np.zeros(0, dtype=int)
    sizes = np.diff(np.r_[starts, len(order)])
    cites = np.rint(np.add.reduceat(y[order], starts)).astype(int) if len(starts) else np.zeros(0, dtype=int)
    informative = (cites > 0) & (cites < sizes)
    out = []
    for n, k in sorted({(int(a), int(b)) for a, b in np.unique(np.column_stack([sizes, cites])[informative], axis=0)}):
        subsets = k_subsets(n, k)
        rows = order[starts[informative & (sizes == n) & (cites == k)][:, None] + np.arange(n)]  # (G, n)
        chosen = chosen_subsets(subsets, y[rows])
        if isinstance(x, CodedDesign):
            coded = x.codes[rows]  # (G, n)
            _, first, pattern = np.unique(row_keys(coded), return_index=True, return_inverse=True)
            patterns = x.table[coded[first]].astype(float)
        else:
            xs = x[rows]  # (G, n, p)
            xs += 0.0  # turns -0.0 into 0.0, so equal rows have equal bytes
            _, first, pattern = np.unique(row_keys(xs), return_index=True, return_inverse=True)
            patterns = xs[first].astype(float)
        out.append(_block(patterns, np.ones((len(first), len(subsets)), dtype=bool), subsets, pattern.ravel(),
                          chosen, cluster_index[rows[:, 0]]))
    return out


def _chunks(s: Strata, patterns: np.ndarray | None = None):
    """(index, subset sums (m, C, p)) over the patterns (or the given pattern indices), a bounded
    number of floats at a time: memory stays within the rows however many patterns there are."""
    idx = np.arange(len(s.x)) if patterns is None else patterns
    step = max(1, _CHUNK // max(1, s.subsets.shape[0] * s.x.shape[2]))
    for start in range(0, len(idx), step):
        part = idx[start:start + step]
        yield part, s.subsets @ s.x[part]


def _pieces(blocks: list[Strata], b: np.ndarray, want_hessian: bool = True):
    """Log-likelihood, gradient and Hessian at b, and each block's pattern means of x (the
    expected subset sum) for the scores."""
    p = len(b)
    llf, grad, hess = 0.0, np.zeros(p), np.zeros((p, p))
    means = []
    for s in blocks:
        chosen_total = np.einsum("gn,gnp->p", s.cited, s.x)  # every stratum's chosen subset's x, summed
        llf += float(chosen_total @ b)
        grad += chosen_total
        mean = np.zeros((len(s.x), p))
        for part, sums in _chunks(s):
            eta = np.where(s.allowed[part], sums @ b, -np.inf)
            top = eta.max(axis=1, keepdims=True)
            w = np.exp(eta - top)
            total = w.sum(axis=1, keepdims=True)
            prob = w / total
            m = s.count[part]
            llf -= float(m @ (top[:, 0] + np.log(total[:, 0])))
            mean[part] = np.einsum("gc,gcp->gp", prob, sums)
            grad -= m @ mean[part]
            if want_hessian:
                weighted = (prob * m[:, None])[:, :, None] * sums
                hess -= weighted.reshape(-1, p).T @ sums.reshape(-1, p) - (mean[part] * m[:, None]).T @ mean[part]
        means.append(mean)
    return llf, grad, hess, means


def _cluster_scores(blocks: list[Strata], means: list[np.ndarray], p: int) -> np.ndarray:
    """Each cluster's summed scores (chosen subset's x minus its expected value), clusters with an
    informative stratum only, in the order of their codes."""
    size = 1 + max((int(s.cluster.max()) for s in blocks if len(s.cluster)), default=-1)
    per = np.zeros((size, p))
    present = np.zeros(size, dtype=bool)
    for s, mean in zip(blocks, means, strict=True):
        present[s.cluster] = True
        step = max(1, _CHUNK // max(1, s.x.shape[1] * p))
        for start in range(0, len(s.pattern), step):
            pat, ch, cl = (a[start:start + step] for a in (s.pattern, s.chosen, s.cluster))
            score = np.einsum("gn,gnp->gp", s.subsets[ch], s.x[pat]) - mean[pat]
            for j in range(p):
                per[:, j] += np.bincount(cl, weights=score[:, j], minlength=size)
    return per[present]


def _pairs(s: Strata) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (pattern, chosen subset) pairs of a block, and how many strata each."""
    c = s.subsets.shape[0]
    pairs, count = np.unique(s.pattern * c + s.chosen, return_counts=True)
    return pairs // c, pairs % c, count


def separation(blocks: list[Strata], null: np.ndarray | None = None) -> Separation | None:
    """A direction d with (x_T - x_S) d <= 0 for every allowed subset T of every stratum and < 0
    for some, or None. One column alone (d = +-e_j) is tried first, since it names the covariate
    plainly; else linear programming finds the direction that rules out the most (total
    strictness with |d_j| <= 1), then the sparsest direction (least L1 norm) that does as much.
    null: (p, m) directions already found, kept out of d. The programme has one row per distinct
    difference (weighted by how often it occurs), not one per stratum and subset."""
    from scipy.optimize import linprog

    rows, weights = _differences(blocks)
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
    total = weights @ rows
    first = linprog(total, A_ub=rows, b_ub=np.zeros(len(rows)), A_eq=equal, b_eq=b_eq,
                    bounds=[(-1, 1)] * p, method="highs")
    if first.status != 0 or first.fun > -tol:
        return None
    # The sparsest direction as strict in total: d = plus - minus, minimise sum(plus + minus).
    a_ub = np.vstack([np.hstack([rows, -rows]), np.hstack([total, -total])[None, :]])
    b_ub = np.concatenate([np.zeros(len(rows)), [first.fun]])
    a_eq = None if equal is None else np.hstack([equal, -equal])
    second = linprog(np.ones(2 * p), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=[(0, None)] * (2 * p),
                     method="highs")
    d = np.asarray(second.x[:p] - second.x[p:]) if second.status == 0 else np.asarray(first.x)
    d = np.where(np.abs(d) > 1e-9 * np.abs(d).max(), d, 0.0)
    return _separation(blocks, d / np.abs(d).max())


def _differences(blocks: list[Strata]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct differences 'an allowed subset's x sum minus its stratum's chosen one' (rows
    all zero left out), and how many (stratum, subset) pairs give each. Made distinct chunk by
    chunk, then once more: every pair's row at once was 0.5 GB of a 33-configuration study at
    100k answers, where the distinct rows are a few MB."""
    diffs, counts = [], []
    for s in blocks:
        pat, ch, cnt = _pairs(s)
        step = max(1, _CHUNK // max(1, s.subsets.shape[0] * s.x.shape[2]))
        for start in range(0, len(pat), step):
            sl = slice(start, start + step)
            sums = s.subsets @ s.x[pat[sl]]
            d = sums - sums[np.arange(len(sums)), ch[sl]][:, None, :]
            allowed = s.allowed[pat[sl]]
            rows, weights = _distinct(d[allowed] + 0.0,  # + 0.0: -0.0 and 0.0 are one row
                                      np.broadcast_to(cnt[sl][:, None], allowed.shape)[allowed].astype(float))
            diffs.append(rows)
            counts.append(weights)
    if not diffs:
        return np.zeros((0, 0)), np.zeros(0)
    return _distinct(np.concatenate(diffs), np.concatenate(counts))


def _distinct(rows: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct nonzero rows (in np.unique's order) and the summed weights of each."""
    nonzero = np.abs(rows).max(axis=1) > 0 if rows.shape[1] else np.zeros(len(rows), dtype=bool)
    rows, weights = rows[nonzero], weights[nonzero]
    if not len(rows):
        return rows, weights
    _, first, inverse = np.unique(row_keys(rows), return_index=True, return_inverse=True)
    return rows[first], np.bincount(inverse.ravel(), weights=weights)


def _separation(blocks: list[Strata], d: np.ndarray) -> Separation:
    determined = 0
    for s in blocks:
        pat, ch, cnt = _pairs(s)
        determined += int(cnt[(_worse(s, pat, ch, d) & s.allowed[pat]).any(axis=1)].sum())
    cols = tuple(int(j) for j in np.flatnonzero(d))
    return Separation(tuple(float(v) for v in d), cols, tuple(int(np.sign(d[j])) for j in cols), determined)


def _worse(s: Strata, pat: np.ndarray, ch: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(m, C) bool: for each (pattern, chosen subset) pair, the subsets that direction d makes
    worse than the chosen one."""
    value = (s.subsets @ s.x[pat]) @ d  # (m, C)
    return value - value[np.arange(len(pat)), ch][:, None] < -_LP_TOL


def _rule_out(blocks: list[Strata], d: np.ndarray) -> list[Strata]:
    """The strata with the subsets that d makes worse than the chosen one removed (probability 0
    in the limit along d): a pattern splits by the subsets its strata's choices rule out."""
    out = []
    for s in blocks:
        pat, ch, _ = _pairs(s)
        allowed = s.allowed[pat] & ~_worse(s, pat, ch, d)  # (pairs, C)
        keys = np.column_stack([pat, allowed]).astype(np.int64)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        c = s.subsets.shape[0]
        pair = np.searchsorted(pat * c + ch, s.pattern * c + s.chosen)  # pairs are sorted by pattern * C + chosen
        out.append(_block(s.x[pat[first]], allowed[first], s.subsets, inverse.ravel()[pair], s.chosen, s.cluster))
    return out


def _newton(blocks: list[Strata], basis: np.ndarray, max_iter: int = 100) -> tuple[np.ndarray, bool, int]:
    """Maximise over b = basis @ c by Newton's method with step halving (the log-likelihood is
    concave: a step that does not raise it is halved until it does). Converged when the Newton
    decrement is below 1e-20 or the step no longer changes the log-likelihood."""
    c = np.zeros(basis.shape[1])
    if not len(c):  # nothing left to estimate: every direction is separated or unidentified
        return c, True, 0
    llf = _pieces(blocks, basis @ c, want_hessian=False)[0]
    for it in range(1, max_iter + 1):
        _, grad, hess, _ = _pieces(blocks, basis @ c)
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


def fit_conditional_logit(y: np.ndarray, x: np.ndarray | CodedDesign, groups: np.ndarray,
                          clusters: np.ndarray | None = None) -> LogitFit:
    """statsmodels' ConditionalLogit, fitted robustly (see the module doc). Strata are the
    `groups`; `clusters` (constant within a group, e.g. the item) define the sandwich's clusters
    (None: each group its own). The columns must be identified within strata (choice_model's
    _identify sees to it); separation is found here. x may be float32 where that is exact (0/1
    codes, positions): half the memory of a million answers' rows."""
    x = x if isinstance(x, CodedDesign) else np.asarray(x)
    return fit_strata(strata(y, x, groups, clusters), x.shape[1])


def fit_strata(blocks: list[Strata], p: int) -> LogitFit:
    """fit_conditional_logit's fit of strata already grouped into patterns of p columns (strata,
    or engine.statistics.choice_patterns' answers read a chunk of runs at a time)."""
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
    llf, _, hess, means = _pieces(blocks, b)
    try:
        inv = np.linalg.inv(-(basis.T @ hess @ basis))
    except np.linalg.LinAlgError:
        inv = np.full((basis.shape[1], basis.shape[1]), np.nan)
        converged = False
    # Sandwich: the scores summed within each cluster, their outer products, times G / (G - 1)
    # (the small-sample factor of statsmodels' cluster covariance for likelihood models).
    per_cluster = _cluster_scores(blocks, means, p) @ basis
    g = len(per_cluster)
    meat = per_cluster.T @ per_cluster * (g / (g - 1) if g > 1 else np.nan)
    cov, cov_cluster = basis @ inv @ basis.T, basis @ inv @ meat @ inv @ basis.T
    squares = (per_cluster @ inv @ basis.T) ** 2  # (G, p): each cluster's influence, squared
    fourth = (squares * squares).sum(axis=0)
    effective = np.divide(squares.sum(axis=0) ** 2, fourth, out=np.zeros(p), where=fourth > 0)
    params = b.copy()
    # A column a null direction moves has no estimate of its own: only combinations orthogonal to
    # the null directions are estimated.
    for j in np.flatnonzero(np.abs(null).max(axis=1, initial=0.0) > 1e-9):
        params[j] = np.nan
        cov[j, :] = cov[:, j] = cov_cluster[j, :] = cov_cluster[:, j] = np.nan
        effective[j] = np.nan
    return LogitFit(params, cov, cov_cluster, g, llf, bool(converged), iterations, tuple(found), effective)


def _complement(null: np.ndarray, p: int) -> np.ndarray:
    """An orthonormal basis of the directions orthogonal to the columns of null (p x m)."""
    if null.shape[1] == 0:
        return np.eye(p)
    u, sv, _ = np.linalg.svd(null, full_matrices=True)
    return u[:, int((sv > 1e-10).sum()):]

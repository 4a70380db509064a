"""The crossed bootstrap: tasks and seeds resampled independently (one task draw and one
seed draw per replicate, shared by every policy, so paired arms share them), and the fast
forms of the statistics it resamples.

A replicate is represented by its multiplicity counts ``ws: (B, seeds)`` and ``wt: (B,
tasks)`` (`draw_counts`), so that statistics are weighted sums instead of gathered copies:
replicate b IS the matrix `resample(x, ws[b], wt[b])`. Each fast form ``f(x, ws, wt) -> (B,
...)`` computes a plain definition of `reports.metrics` (or the mean) on every replicate
at once; it is registered against that definition (`fast_form_of`, the table `FAST`, with
the tolerance it is equal to: 0 = bit for bit), and
tests/reports/test_reports_fast_forms.py checks each one against its definition on
explicit random resamples. The plain function is the definition; the fast form is only
faster. Randomness only through a passed ``np.random.Generator``. Intervals from the
replicates: `reports.readings.intervals.percentile_interval`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from policies.errors import UserError
from reports import metrics

Progress = Callable[[int, int, str], None]


# ------------------------------------------------------------------ definitions and fast forms

@dataclass(frozen=True)
class FastForm:
    """A fast form ``fast(x, ws, wt) -> (B, ...)`` of ``definition`` (a function of one
    replicate), equal to it on every replicate within ``rtol`` (0: bit for bit)."""

    definition: Callable
    fast: Callable
    rtol: float
    arity: int = 1  # 2: definition(x, y), fast(x, y, ws, wt), both arms resampled by the same draws


#: definition -> its registered fast form (`fast_form_of`)
FAST: dict[Callable, FastForm] = {}

#: `weighted_iqm`'s agreement with `metrics.iqm`: bit for bit up to its ``max_levels`` distinct
#: values (binary metrics: exact integer sums); above, the values and their weighted sum are
#: float32 (the cost of the sort-free product), so about 1e-7 relative per term
IQM_RTOL = 1e-5


def fast_form_of(definition: Callable, rtol: float = 0.0, arity: int = 1) -> Callable:
    """Register the decorated function as the fast form of ``definition`` (module docstring)."""
    def register(fast: Callable) -> Callable:
        FAST[definition] = FastForm(definition, fast, rtol, arity)
        return fast
    return register


def resample(x: np.ndarray, ws_row: np.ndarray, wt_row: np.ndarray) -> np.ndarray:
    """The replicate that one row of counts stands for, as an explicit array: seed s repeated
    ws_row[s] times, task t wt_row[t] times. x: (..., seeds, tasks) -> (..., seeds, tasks)."""
    si = np.repeat(np.arange(x.shape[-2]), np.rint(ws_row).astype(np.int64))
    ti = np.repeat(np.arange(x.shape[-1]), np.rint(wt_row).astype(np.int64))
    return x[..., si, :][..., ti]


# ------------------------------------------------------------------ the draws


#: bytes one bootstrap temporary may take: every statistic below splits its resamples (and
#: policies) into blocks of at most this size (`block_rows`); results do not depend on it
BLOCK_BYTES = 16 * 2 ** 20

#: resamples drawn per block of the random stream (seed draws, then task draws): part of
#: what a seed means, so it is fixed (changing it would change every interval)
DRAW_BLOCK = 1000


def block_rows(row_bytes: int, rows: int, multiple: int = 1) -> int:
    """Rows of ``row_bytes`` bytes each that fit in BLOCK_BYTES: at least ``multiple``, a
    multiple of it, at most ``rows`` (the one chunk-size rule of the bootstraps)."""
    fit = max(multiple, int(BLOCK_BYTES // max(1, row_bytes)) // multiple * multiple)
    return max(1, min(rows, fit))


def draw_counts(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    """Multiplicities of ``n`` items in ``size`` bootstrap draws of n with replacement:
    (size, n) float64, each row sums to n. Drawn in row blocks (the same stream as one draw)."""
    out = np.empty((size, n))
    step = block_rows(16 * n, size)
    for start in range(0, size, step):
        b = min(step, size - start)
        idx = rng.integers(0, n, size=(b, n))  # (b, n) drawn item indices
        idx += n * np.arange(b)[:, None]
        out[start:start + b] = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)
    return out


def percentile_coverage(n_seeds: int, coverage: float = 0.95) -> float:
    """What the crossed bootstrap's percentile interval of a mean over seeds covers when
    run-to-run variation dominates (the worst case: tasks add nothing): the bootstrap's
    spread is the plug-in sd, sqrt((n - 1) / n) of the sample sd, so the interval is about
    mean +- z * sqrt((n - 1) / n) * se, a t(n - 1) statistic inside z sqrt((n - 1) / n):
    2 F_t(z sqrt((n - 1) / n); n - 1) - 1. 0.846 at 5 seeds, 0.904 at 10, 0.929 at 20, 0.933
    at 25 (`tests/reports/test_reports_inference.py` checks it by simulation). nan below 2."""
    if n_seeds < 2:
        return float("nan")
    from scipy import stats as sps

    z = float(sps.norm.ppf(0.5 + coverage / 2)) * np.sqrt((n_seeds - 1) / n_seeds)
    return float(2 * sps.t.cdf(z, n_seeds - 1) - 1)


def crossed_bootstrap(x: np.ndarray, stat: Callable, *, resamples: int, rng: np.random.Generator,
                      chunk: int = DRAW_BLOCK, progress: Progress | None = None, label: str = "") -> np.ndarray:
    """Generic crossed bootstrap. x: (..., seeds, tasks); stat(x, ws, wt) -> (b, ...).

    Tasks and seeds are resampled with replacement, one task draw and one seed draw per
    replicate shared by everything in ``x`` (so paired arms share them). Returns the
    (resamples, ...) replicates. Drawn in blocks of ``chunk`` resamples (the random
    stream: seeds then tasks of each block); the statistics bound their own memory
    (`block_rows`); progress(done, total, label).
    """
    if resamples < 1:
        raise UserError(f"resamples: got {resamples}, allowed: an integer >= 1")
    s, t = x.shape[-2:]
    out = None
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        ws, wt = draw_counts(rng, b, s), draw_counts(rng, b, t)
        part = stat(x, ws, wt)
        if out is None:
            out = np.empty((resamples, *part.shape[1:]), dtype=part.dtype)
        out[start:start + b] = part
        if progress is not None:
            progress(start + b, resamples, label)
    return out


# ------------------------------------------------------------------ the fast forms

@fast_form_of(metrics.mean, rtol=1e-13)
def weighted_mean(x: np.ndarray, ws: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """Bootstrap means. x: (..., seeds, tasks); ws: (B, seeds); wt: (B, tasks) -> (B, ...).
    The task weights by one matrix product per block of resamples, then the seed weights.
    Integer-valued x (binary metrics) sums exact integers, so its bits do not depend on
    the order; other values agree with any summation order to rounding (~1e-16 relative)."""
    s, t = x.shape[-2:]
    lead = x.shape[:-2]
    out = np.empty((ws.shape[0], *lead))
    step = block_rows(8 * int(np.prod(lead, dtype=np.int64)) * s, ws.shape[0])
    rows = x.reshape(-1, t)
    for b0 in range(0, ws.shape[0], step):
        y = (rows @ wt[b0:b0 + step].T).reshape(*lead, s, -1)  # (..., seeds, b)
        out[b0:b0 + step] = np.einsum("...sb,bs->b...", y, ws[b0:b0 + step]) / (s * t)
    return out


def _trimmed(values: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """Mean of sorted positions [cut, n - cut) of the multiset {values[j] x w[b, j]}.
    values: (U,) ascending; w: (B, U) integer multiplicities summing to n -> (B,).
    ``w`` is overwritten (it is a temporary of the caller). The multiplicity kept of value
    j is clip(end_j) - clip(end_{j-1}), ends = cumulative weights clipped to [cut, n - cut]
    (exact: integers)."""
    cut = int(0.25 * n)
    ends = np.cumsum(w, axis=1)  # end position of each value's block
    np.clip(ends, cut, n - cut, out=ends)
    np.subtract(ends[:, 1:], ends[:, :-1], out=w[:, 1:])  # multiplicity kept inside [cut, n - cut)
    np.subtract(ends[:, 0], cut, out=w[:, 0])
    return w @ values.astype(w.dtype) / (n - 2 * cut)


def _level_counts(inverse: np.ndarray, levels: int, ws: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """(B, levels) resampled multiplicity of each value: sum_st ws[b, s] wt[b, t] [inverse[s, t] = u]
    (integer sums, so exact whatever the order). inverse: (seeds, tasks)."""
    s, t = inverse.shape
    out = np.empty((ws.shape[0], levels))
    step = block_rows(8 * s * max(t, ws.shape[0]), levels)
    for u0 in range(0, levels, step):
        u = np.arange(u0, min(levels, u0 + step))
        onehot = (inverse[None] == u[:, None, None]).reshape(-1, t).astype(np.float64)  # (u * S, T)
        per = (wt @ onehot.T).reshape(-1, u.size, s)  # (B, u, S)
        out[:, u] = np.einsum("bus,bs->bu", per, ws)
    return out


def level_counts(x: np.ndarray, levels: np.ndarray, ws: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """(B, ..., U) resampled multiplicity of each of ``levels`` in every lead slice of x:
    sum_st ws[b, s] wt[b, t] [x[..., s, t] = levels[u]]. x: (..., seeds, tasks). Integer
    sums (exact whatever the order, so equal to the weighted mean of the one-hot times
    S * T); the one-hot rows times the task counts in blocks of BLOCK_BYTES."""
    s, t = x.shape[-2:]
    lead = x.shape[:-2]
    onehot = (x[..., None, :, :] == levels[:, None, None]).reshape(-1, t)  # (L * U * S, T) bool
    per = np.empty((onehot.shape[0], ws.shape[0]))  # (L * U * S, B) task-weighted counts
    step = block_rows(8 * max(t, ws.shape[0]), onehot.shape[0])
    for r0 in range(0, onehot.shape[0], step):
        per[r0:r0 + step] = onehot[r0:r0 + step].astype(np.float64) @ wt.T
    per = per.reshape(-1, s, ws.shape[0])  # (L * U, S, B)
    out = np.einsum("ksb,bs->bk", per, ws)  # (B, L * U)
    return out.reshape(ws.shape[0], *lead, levels.size)


@fast_form_of(metrics.iqm, rtol=IQM_RTOL)
def weighted_iqm(x: np.ndarray, ws: np.ndarray, wt: np.ndarray, max_levels: int = 64) -> np.ndarray:
    """Bootstrap IQM, exactly ``trim_mean(resample, 0.25)`` of each replicate.

    x: (policies, seeds, tasks); ws: (B, seeds); wt: (B, tasks) -> (B, policies). The
    resampled multiset of a policy is its values with multiplicity ws[s] * wt[t]; the
    kept sorted positions [cut, n - cut) are integrated with cumulative weights. With at
    most ``max_levels`` distinct values (binary metrics) multiplicities are summed per
    value first, which is much cheaper. Multiplicities are integers < 2**24, so float32
    sums are exact. Resamples in blocks of about BLOCK_BYTES (`_gemv_blocks`).
    """
    p, s, t = x.shape
    out = np.empty((ws.shape[0], p))
    ws32, wt32 = ws.astype(np.float32), wt.astype(np.float32)
    for j in range(p):
        levels, inverse = np.unique(x[j], return_inverse=True)
        if levels.size <= max_levels:
            out[:, j] = _trimmed(levels, np.rint(_level_counts(inverse.reshape(s, t), levels.size, ws, wt)), s * t)
            continue
        flat = x[j].ravel()
        order = np.argsort(flat, kind="stable")
        values, seed_of, task_of = flat[order].astype(np.float32), order // t, order % t
        for b0, b1 in _gemv_blocks(ws.shape[0], block_rows(8 * s * t, ws.shape[0], multiple=16)):
            cols = 4 if b1 - b0 < 4 <= ws.shape[0] else b1 - b0  # see _kept_product
            w = np.zeros((-(-s * t // GROUP) * GROUP, cols), np.float32)  # (S*T, b) weights in sorted order
            np.multiply(np.take(ws32[b0:b1].T, seed_of, axis=0), np.take(wt32[b0:b1].T, task_of, axis=0),
                        out=w[:s * t, :b1 - b0])
            out[b0:b1, j] = _kept_product(values, w, s * t, 3 if cols > b1 - b0 else cols)[:b1 - b0]
    return out


def _gemv_blocks(rows: int, step: int) -> list[tuple[int, int]]:
    """Row blocks of a float32 matrix-vector product that give every row the result of one
    call on all ``rows``: OpenBLAS's column-major sgemv sends the first (rows & 12) rows
    through its 4/8-row path, then 16-row steps, the last rows % 4 through its scalar path
    (row counts below 4096); each block here stays on one path (tests check the equality)."""
    if rows >= 4096:
        return [(0, rows)]
    head, tail = rows & 12, rows - rows % 4
    body = [(b, min(b + step, tail)) for b in range(head, tail, step)]
    return [blk for blk in [(0, head), *body, (tail, rows)] if blk[1] > blk[0]]


#: positions per group of `_kept_product`: the cumulative weights are summed per group,
#: exactly, and only the groups where a cut falls are summed position by position
GROUP = 64


def _kept_product(values: np.ndarray, w: np.ndarray, n: int, rows: int) -> np.ndarray:
    """The sum of `_trimmed` for the columns of ``w`` (weights (U padded to GROUP, >= rows) in
    sorted order of ``values`` (U,) float32; overwritten by the kept multiplicities), as
    the weights column-major -- the layout of the gathered weights -- times ``values``, so
    that the product takes the same BLAS path. The last rows % 4 of a larger set come as
    3 rows of a leading dimension 4 (zeros after them): OpenBLAS's scalar path for them
    sums each row in order, but takes another path when the leading dimension equals the
    rows, and numpy a dot product for one row."""
    cut = int(0.25 * n)
    top = n - cut
    groups = w.reshape(-1, GROUP, w.shape[1])  # (G, GROUP, b)
    size = groups.sum(axis=1)  # (G, b) exact: integers < 2**24
    end = np.cumsum(size, axis=0)
    start = end - size
    cols = np.arange(w.shape[1])
    exact = []
    for g in (np.argmax(end > cut, axis=0), np.where((end > top).any(axis=0), np.argmax(end > top, axis=0), 0)):
        block = groups[g, :, cols]  # (b, GROUP): the groups where a cut may fall, position by position
        ends = np.clip(start[g, cols][:, None] + np.cumsum(block, axis=1), cut, top)
        exact.append((g, np.diff(ends, axis=1, prepend=np.clip(start[g, cols], cut, top)[:, None])))
    groups *= ((start >= cut) & (end <= top))[:, None, :]  # whole groups inside [cut, n - cut) or out
    for g, kept in exact:
        groups[g, :, cols] = kept
    return w[:n, :rows].T @ values / (n - 2 * cut)


def superiority_table(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """2 g (`metrics.superiority`) of x, y: (K, seeds, tasks), seed pairs folded by symmetry for the
    bootstrap: (S (S + 1) / 2, K, T) int8 holding 2 (g[i, j] + g[j, i]) for i < j and 2 g[i, i]
    (weights ws[i] ws[j] are symmetric). Built one row of K at a time."""
    k, s, t = x.shape
    iu, ju = np.triu_indices(s, 1)
    out = np.empty((s + iu.size, k, t), dtype=np.int8)
    for r in range(k):
        g2 = (2 * metrics.superiority(x[r], y[r])).astype(np.int8)  # (S, S, T)
        out[:s, r] = g2[np.arange(s), np.arange(s)]
        out[s:, r] = g2[iu, ju] + g2[ju, iu]
    return out


def table_prob_improvement(table: np.ndarray, ws: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """(B, K) bootstrap P(X > Y) from a `superiority_table`: sum_ij ws_i ws_j g_ijt, then the
    task weights, / (S^2 T). Every sum is of integers and halves below 2 S^2 T, so it is
    exact (float32 while that is below 2^24) and equal to the float64 sum of any order."""
    pairs, k, t = table.shape
    s = ws.shape[1]
    dtype = np.float32 if 2 * s * s * t < 2 ** 24 else np.float64
    size = np.dtype(dtype).itemsize
    iu, ju = np.triu_indices(s, 1)
    half = (np.concatenate([ws * ws, ws[:, iu] * ws[:, ju]], axis=1) * 0.5).astype(dtype)  # (B, pairs)
    wt = wt.astype(dtype)[:, :, None]  # (B, T, 1)
    out = np.empty((ws.shape[0], k))
    kb = block_rows(pairs * t * (1 + size), k)
    rows = block_rows(kb * t * size, ws.shape[0])
    for k0 in range(0, k, kb):
        k1 = min(k, k0 + kb)
        g = table[:, k0:k1].reshape(pairs, -1).astype(dtype)  # (pairs, kb * T)
        for b0 in range(0, ws.shape[0], rows):
            per = (half[b0:b0 + rows] @ g).reshape(-1, k1 - k0, t)  # (b, kb, T)
            out[b0:b0 + rows, k0:k1] = (per @ wt[b0:b0 + rows])[..., 0]
    return out / (s * s * t)


@fast_form_of(metrics.prob_improvement, arity=2)
def weighted_prob_improvement(x: np.ndarray, y: np.ndarray, ws: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """Bootstrap P(X > Y) with seed draws shared by both arms.

    x, y: (..., seeds, tasks); ws: (B, seeds); wt: (B, tasks) -> (B, ...). One GEMM over
    the seed pairs: sum_ij ws[b, i] ws[b, j] g[..., i, j, t], then the task weights
    (`superiority_table`, `table_prob_improvement`; a caller with many draw blocks builds the table once).
    """
    s, t = x.shape[-2:]
    lead = x.shape[:-2]
    x, y = np.broadcast_arrays(x, y)
    out = table_prob_improvement(superiority_table(x.reshape(-1, s, t), y.reshape(-1, s, t)), ws, wt)
    return out.reshape(out.shape[0], *lead)


@fast_form_of(metrics.aggregate_median, rtol=1e-13)
def weighted_median(x: np.ndarray, ws: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """Bootstrap median of per-task means, `metrics.aggregate_median` of each replicate (the
    task means are weighted sums: bit for bit for integer-valued x, else to rounding).
    x: (..., seeds, tasks); ws: (B, seeds); wt: (B, tasks) integer counts -> (B, ...).
    The task counts are turned back into the drawn task indices (each row sums to T)."""
    s, t = x.shape[-2:]
    lead = x.shape[:-2]
    out = np.empty((ws.shape[0], *lead))
    # in blocks of replicates: the task means, their gather and the median's partition copy
    step = block_rows(3 * 8 * int(np.prod(lead, dtype=np.int64)) * t, ws.shape[0])
    for b0 in range(0, ws.shape[0], step):
        w_s, w_t = ws[b0:b0 + step], wt[b0:b0 + step]
        m = np.moveaxis(np.matmul(np.swapaxes(x, -1, -2), w_s.T), -1, 0) / s  # (b, ..., T) task means
        drawn = np.repeat(np.tile(np.arange(t), w_t.shape[0]), np.rint(w_t).astype(np.int64).ravel()).reshape(-1, t)
        drawn = drawn.reshape(drawn.shape[0], *(1,) * (m.ndim - 2), t)
        out[b0:b0 + step] = np.median(np.take_along_axis(m, drawn, axis=-1), axis=-1)
    return out


@fast_form_of(metrics.profile, rtol=1e-12)
def weighted_profile(x: np.ndarray, ws: np.ndarray, wt: np.ndarray, taus=metrics.TAUS) -> np.ndarray:
    """Bootstrap score distributions, `metrics.profile` of each replicate (to rounding: the
    shares are summed per bin). x: (..., seeds, tasks) -> (B, ..., taus). A value is above taus[k] exactly when k is
    below its bin (the number of taus under it), so only the bins' resampled shares are
    needed: the resampled counts of the bins that occur (at most len(taus) + 1, four for
    pass@1 of three attempts; `level_counts`, exact integers)."""
    taus = np.asarray(taus, dtype=np.float64)
    bins = np.searchsorted(taus, x, side="left")  # (..., S, T): taus[k] < x  <=>  k < bins
    levels = np.unique(bins)
    share = level_counts(bins, levels, ws, wt) / (bins.shape[-2] * bins.shape[-1])  # (B, ..., U)
    return share @ (levels[None, :] > np.arange(taus.size)[:, None]).T.astype(np.float64)  # (B, ..., K)

"""The bootstrap statistics in memory-bounded blocks (`reports.bootstrap.block_rows`) give the
same bits as one block (exact integer sums; float means agree to rounding), and as the
straightforward one-call formulas they replace."""
from __future__ import annotations

import numpy as np
import pytest

from reports import bootstrap, metrics


def _reference_iqm(x, ws, wt):
    """The one-call formula: gathered float32 weights (column-major, as numpy's fancy
    indexing makes them), cumulative positions clipped to [cut, n - cut), one product."""
    p, s, t = x.shape
    out = np.empty((ws.shape[0], p))
    for j in range(p):
        flat = x[j].ravel()
        order = np.argsort(flat, kind="stable")
        w = ws.astype(np.float32)[:, order // t]
        w *= wt.astype(np.float32)[:, order % t]
        n = s * t
        cut = int(0.25 * n)
        hi = np.cumsum(w, axis=1)
        lo = np.maximum(hi - w, cut)
        hi = np.maximum(np.minimum(hi, n - cut) - lo, 0)
        out[:, j] = hi @ flat[order].astype(hi.dtype) / (n - 2 * cut)
    return out


def _reference_pi(x, y, ws, wt):
    s, t = x.shape[-2:]
    g = metrics.superiority(x, y).reshape(-1, s * s, t)
    pair = (ws[:, :, None] * ws[:, None, :]).reshape(-1, s * s)
    per = (pair @ g.transpose(1, 0, 2).reshape(s * s, -1)).reshape(-1, g.shape[0], t)
    return np.einsum("bkt,bt->bk", per, wt) / (s * s * t)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 13, 16, 29, 100, 999])
def test_iqm_and_pi_blocks_equal_one_call(rows, monkeypatch):
    rng = np.random.default_rng(rows)
    s, t = 4 + rows % 5, 50 + 7 * rows % 300
    x = np.round(rng.random((2, s, t)), 3)  # continuous: > 64 levels
    ws, wt = bootstrap.draw_counts(rng, rows, s), bootstrap.draw_counts(rng, rows, t)
    monkeypatch.setattr(bootstrap, "BLOCK_BYTES", 1)  # the smallest blocks
    small = bootstrap.weighted_iqm(x, ws, wt), bootstrap.weighted_prob_improvement(x, x[[0, 0]], ws, wt)
    monkeypatch.setattr(bootstrap, "BLOCK_BYTES", 2 ** 40)  # one block
    big = bootstrap.weighted_iqm(x, ws, wt), bootstrap.weighted_prob_improvement(x, x[[0, 0]], ws, wt)
    assert np.array_equal(small[0], big[0]) and np.array_equal(small[1], big[1])
    assert np.array_equal(big[0], _reference_iqm(x, ws, wt))
    assert np.array_equal(big[1], _reference_pi(x, x[[0, 0]], ws, wt))


def test_draws_and_means_do_not_depend_on_the_block(monkeypatch):
    x = np.random.default_rng(1).random((3, 6, 40))
    monkeypatch.setattr(bootstrap, "BLOCK_BYTES", 64)
    a = bootstrap.crossed_bootstrap(x, bootstrap.weighted_mean, resamples=1234, rng=np.random.default_rng(5))
    monkeypatch.setattr(bootstrap, "BLOCK_BYTES", 2 ** 40)
    b = bootstrap.crossed_bootstrap(x, bootstrap.weighted_mean, resamples=1234, rng=np.random.default_rng(5))
    assert a.shape == (1234, 3)  # the same draws; the means agree to rounding (BLAS's summation order)
    np.testing.assert_allclose(a, b, rtol=1e-14, atol=0)
    xi = np.rint(4 * x)  # integer values: exact sums, so the bits too
    monkeypatch.setattr(bootstrap, "BLOCK_BYTES", 64)
    c = bootstrap.crossed_bootstrap(xi, bootstrap.weighted_mean, resamples=1234, rng=np.random.default_rng(5))
    monkeypatch.setattr(bootstrap, "BLOCK_BYTES", 2 ** 40)
    assert np.array_equal(c, bootstrap.crossed_bootstrap(xi, bootstrap.weighted_mean, resamples=1234,
                                                     rng=np.random.default_rng(5)))
    counts = bootstrap.draw_counts(np.random.default_rng(2), 7, 5)
    assert counts.shape == (7, 5) and (counts.sum(axis=1) == 5).all()


def test_block_rows_and_gemv_blocks():
    assert bootstrap.block_rows(bootstrap.BLOCK_BYTES // 10, 1000) == 10
    assert bootstrap.block_rows(bootstrap.BLOCK_BYTES // 40, 1000, multiple=16) == 32
    assert bootstrap.block_rows(10 ** 12, 7) == 1 and bootstrap.block_rows(1, 7) == 7
    # head (rows & 12), 16-row steps, then the rows % 4 tail; contiguous and complete
    assert bootstrap._gemv_blocks(1001, 32)[:2] == [(0, 8), (8, 40)] and bootstrap._gemv_blocks(1001, 32)[-1] == (1000, 1001)
    blocks = bootstrap._gemv_blocks(999, 48)
    assert blocks[0][0] == 0 and blocks[-1][1] == 999 and all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert all((b - a) % 16 == 0 for a, b in blocks[1:-1])

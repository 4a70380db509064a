"""pass@k and pass^k of one task from its attempts: the cell metrics of the reports
(`reports.cells.cell_metrics`). Pure numpy, elementwise over any shape."""
from __future__ import annotations

import numpy as np

from policies.errors import UserError


def _check_counts(n: np.ndarray, c: np.ndarray, k: int) -> None:
    if k < 1:
        raise UserError(f"k: got {k}, allowed: an integer >= 1")
    if np.any(c < 0) or np.any(c > n):
        raise UserError("c: successes must satisfy 0 <= c <= n")
    if n.size and k > int(n.min()):
        raise UserError(f"k: got {k}, allowed: k <= number of attempts n = {int(n.min())}")


def pass_at_k(n, c, k: int) -> np.ndarray:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k), elementwise over ``n, c`` (any shape).

    Product form 1 - prod_{i=n-c+1}^{n} (1 - k/i) (Chen et al. 2021), numerically stable;
    when n - c < k the range contains i = k and the result is exactly 1.
    """
    n, c = np.broadcast_arrays(np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64))
    _check_counts(n, c, k)
    i = np.arange(1, int(n.max(initial=0)) + 1, dtype=np.float64)  # (N,)
    inside = (i > (n - c)[..., None]) & (i <= n[..., None])
    return 1.0 - np.where(inside, 1.0 - k / i, 1.0).prod(axis=-1)


def pass_hat_k(n, c, k: int) -> np.ndarray:
    """pass^k = C(c, k) / C(n, k): probability that k attempts drawn without replacement
    all succeed, elementwise; 0 when c < k."""
    n, c = np.broadcast_arrays(np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64))
    _check_counts(n, c, k)
    i = np.arange(k, dtype=np.float64)  # (k,)
    return (np.maximum(c[..., None] - i, 0.0) / (n[..., None] - i)).prod(axis=-1)

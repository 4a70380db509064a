"""Gradient-sketch coordinate planner (SPEC §2.4), numpy only.

`plan_sketch(shapes, d, seed)` fixes, once per run, which flat coordinates of which
parameter tensors make up the d-dimensional sketch:

* each tensor gets a quota proportional to its element count, rounded by the largest
  remainder method so that the quotas sum to d exactly (ties broken by name order);
* within a tensor the quota's coordinates are drawn uniformly without replacement;
* if the whole set has at most d elements, every coordinate is taken.

Tensors are visited in sorted-name order with one generator seeded from `seed`, so
the plan depends only on (names, shapes, d, seed), not on dict order. The sketch
vector is the concatenation of the per-tensor coordinate lists in that order, each
list sorted ascending. `real_runs.native.sketch` maps the plan onto torch parameters (and
picks them: `block_parameters`, the last blocks without embeddings or the head).
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from policies.validate import check_int


def largest_remainder_quotas(sizes: np.ndarray, d: int) -> np.ndarray:
    """Integer quotas proportional to `sizes` (n,) that sum to min(d, sum(sizes)).

    floor(d * size / total) each, then one more for the largest fractional parts
    (ties: lower index first). Never exceeds a tensor's size.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total <= d:
        return sizes.copy()
    # exact integer arithmetic (Python ints) for floors and fractional parts
    products = [int(s) * int(d) for s in sizes]
    quotas = np.array([p // total for p in products], dtype=np.int64)
    frac_num = [p % total for p in products]
    remaining = d - int(quotas.sum())
    order = sorted(range(len(sizes)), key=lambda i: (-int(frac_num[i]), i))
    for i in order[:remaining]:
        quotas[i] += 1
    return np.minimum(quotas, sizes)


def plan_sketch(shapes: Mapping[str, Iterable[int]], d: int = 65536, seed: int = 0) -> dict[str, np.ndarray]:
    """name -> sorted int64 flat coordinates, quotas summing to min(d, total elements).

    shapes: name -> tensor shape. d: sketch dimension (> 0). seed: plan seed (>= 0).
    """
    check_int("d", d, 1, 2**40)
    check_int("seed", seed, 0, 2**63 - 1)
    if not shapes:
        raise ValueError("shapes={} is not allowed: the sketch needs at least one parameter tensor")
    names = sorted(shapes)
    sizes = np.array([int(np.prod(tuple(shapes[n]), dtype=np.int64)) for n in names], dtype=np.int64)
    quotas = largest_remainder_quotas(sizes, d)
    rng = np.random.default_rng(seed)
    plan = {}
    for name, size, quota in zip(names, sizes, quotas):
        if quota == size:
            coords = np.arange(size, dtype=np.int64)
        else:
            coords = np.sort(rng.choice(int(size), size=int(quota), replace=False).astype(np.int64))
        plan[name] = coords
    return plan


"""Signal maths of the fused scheduler (SPEC §2.5, §3) as pure functions.

Everything here works on plain numpy arrays passed in by the caller; the functions
that update state do so in place on the arrays they are given and say so. No
randomness is used.

* pooled sliding-window min-max normaliser: `window_push`, `window_values`, `minmax_normalise`
* transfer memory (EMA of unit sketches): `sketch_norm`, `transfer_and_update`
* fusions: `FUSIONS` (name -> function of (l_norm, t_norm, alpha) with NaN = missing)
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

# --------------------------------------------------------------------------------------
# Pooled sliding window (one ring buffer per signal, shared by all harnesses)
# --------------------------------------------------------------------------------------


def window_push(buffer: np.ndarray, count: int, value: float) -> int:
    """Append `value` to the ring `buffer` (capacity W) holding `count` values so far.

    Mutates `buffer` in place; returns the new count. Once more than W values were
    pushed, the oldest is overwritten, so the window holds the W most recent values.
    """
    buffer[count % buffer.shape[0]] = value
    return count + 1


def window_values(buffer: np.ndarray, count: int) -> np.ndarray:
    """The values currently in the window (order not meaningful): (min(count, W),)."""
    return buffer[: min(count, buffer.shape[0])]


def minmax_normalise(x: float, values: np.ndarray, degenerate: float = 0.5) -> float:
    """clip((x - min W) / (max W - min W), 0, 1); `degenerate` if |W| < 2 or max == min.

    values: (n,) the window AFTER x was appended (SPEC §3 step 3).
    """
    if values.shape[0] < 2:
        return degenerate
    lo, hi = float(values.min()), float(values.max())
    if hi == lo:
        return degenerate
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


# --------------------------------------------------------------------------------------
# Transfer memory
# --------------------------------------------------------------------------------------


def sketch_norm(sketch: np.ndarray | None) -> float:
    """||sketch||_2, or NaN when the sketch is absent, empty or not finite.

    One pass (a dot product). A float32 dot that overflows to inf falls back to a
    scaled float64 norm, so only genuinely non-finite sketches are reported as NaN.
    """
    if sketch is None or sketch.size == 0:
        return float("nan")
    with np.errstate(over="ignore", invalid="ignore"):
        sq = float(np.dot(sketch, sketch))
    if math.isfinite(sq):
        return math.sqrt(sq)
    if not np.isfinite(sketch).all():
        return float("nan")
    big = np.abs(sketch).max().astype(np.float64)
    scaled = sketch.astype(np.float64) / big
    return float(big * math.sqrt(float(np.dot(scaled, scaled))))


def transfer_and_update(memory: np.ndarray, has_memory: np.ndarray, memory_norm: np.ndarray,
                        last_update: np.ndarray, arm: int, sketch: np.ndarray | None, eta: float,
                        step: int, eligible: np.ndarray | None = None,
                        scratch: np.ndarray | None = None, g_norm: float | None = None) -> float:
    """Transferability of `arm`'s sketch, then the EMA update of its memory (SPEC §2.5).

    memory: (H, d) float, the memories m_h (rows of harnesses without memory are ignored)
    has_memory: (H,) bool; memory_norm: (H,) float ||m_h||; last_update: (H,) int, the
    global step of each memory's last update. All four are updated IN PLACE for `arm`.
    eligible: optional (H,) bool, which other memories may be compared (age limits).
    scratch: optional (d,) buffer of memory's dtype, to avoid allocations.
    g_norm: optional precomputed `sketch_norm(sketch)` (saves one pass).

    Returns T = mean over j != arm with an existing, non-zero (eligible) memory of
    cos(sketch, m_j), computed BEFORE m_arm is updated; NaN when no such memory exists.
    A zero-norm, absent or non-finite sketch gives NaN and leaves the memory untouched.
    """
    if g_norm is None:
        g_norm = sketch_norm(sketch)
    if not math.isfinite(g_norm) or g_norm == 0.0:
        return float("nan")
    others = has_memory & (memory_norm > 0)
    others[arm] = False
    if eligible is not None:
        others &= eligible
    transfer = float("nan")
    if others.any():
        dots = memory @ sketch                                  # (H,)
        cos = dots[others] / (g_norm * memory_norm[others])
        transfer = float(np.mean(cos))
    row = memory[arm]
    if scratch is None:
        scratch = np.empty_like(row)
    if has_memory[arm]:
        row *= (1.0 - eta)
        np.multiply(sketch, eta / g_norm, out=scratch, casting="same_kind")
        row += scratch
    else:
        np.multiply(sketch, 1.0 / g_norm, out=row, casting="same_kind")
        has_memory[arm] = True
    memory_norm[arm] = math.sqrt(float(np.dot(row, row)))
    last_update[arm] = step
    return transfer


# --------------------------------------------------------------------------------------
# Fusions: (l_norm, t_norm, alpha) -> S, NaN meaning "missing"
# --------------------------------------------------------------------------------------


def _one_or_both(both: Callable[[float, float, float], float]) -> Callable[[float, float, float], float]:
    """Lift a two-signal fusion: one present -> that one; none -> NaN."""

    def fuse(l_norm: float, t_norm: float, alpha: float) -> float:
        l_ok, t_ok = not math.isnan(l_norm), not math.isnan(t_norm)
        if l_ok and t_ok:
            return both(l_norm, t_norm, alpha)
        if l_ok:
            return l_norm
        return t_norm if t_ok else float("nan")

    fuse.__doc__ = both.__doc__
    return fuse


@_one_or_both
def fuse_mean(l_norm: float, t_norm: float, alpha: float) -> float:
    """alpha * L~ + (1 - alpha) * T~ (the paper's fusion)."""
    return alpha * l_norm + (1.0 - alpha) * t_norm


@_one_or_both
def fuse_product(l_norm: float, t_norm: float, alpha: float) -> float:
    """L~ * T~: both signals must be high."""
    return l_norm * t_norm


@_one_or_both
def fuse_min(l_norm: float, t_norm: float, alpha: float) -> float:
    """min(L~, T~): the weaker signal decides."""
    return min(l_norm, t_norm)


def fuse_learnability(l_norm: float, t_norm: float, alpha: float) -> float:
    """L~ only (T is never computed)."""
    return l_norm


def fuse_transfer(l_norm: float, t_norm: float, alpha: float) -> float:
    """T~ only (no Q update while T is missing)."""
    return t_norm


FUSIONS: dict[str, Callable[[float, float, float], float]] = {
    "mean": fuse_mean,
    "product": fuse_product,
    "min": fuse_min,
    "learnability": fuse_learnability,
    "transfer": fuse_transfer,
}

#: Which raw signals a fusion needs (the others are not computed at all).
FUSION_USES: dict[str, tuple[bool, bool]] = {
    "mean": (True, True), "product": (True, True), "min": (True, True),
    "learnability": (True, False), "transfer": (False, True),
}


# --------------------------------------------------------------------------------------
# Selection law
# --------------------------------------------------------------------------------------


def selection_probabilities(q: np.ndarray, q_defined: np.ndarray, n: np.ndarray, bonus_c: float,
                            tau: float, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """The post-warm-up law of SPEC §3. Returns (p, U), both (H,).

    Q'_h = Q_h if defined else max defined Q (0.0 if none); U = Q' + c / sqrt(n + 1);
    p = (1 - eps) softmax(U / tau) + eps / H.
    """
    fill = float(q[q_defined].max()) if q_defined.any() else 0.0
    q_prime = np.where(q_defined, q, fill)
    u = q_prime + bonus_c / np.sqrt(n + 1.0)
    z = (u - u.max()) / tau
    e = np.exp(z)
    p = (1.0 - epsilon) * e / e.sum() + epsilon / q.shape[0]
    return p, u
